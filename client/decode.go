package client

import "encoding/json"

// decodePushed reads the push answer {"pushed": n}.
func decodePushed(data []byte) (int, error) {
	var v struct {
		Pushed int `json:"pushed"`
	}
	err := json.Unmarshal(data, &v)
	return v.Pushed, err
}

// decodePop reads a pop answer into out; every message gets Queue = queue,
// and no messages is an empty, non-nil slice.
func decodePop(data []byte, queue string, out *PopResult) error {
	if err := json.Unmarshal(data, out); err != nil {
		return err
	}
	if out.Messages == nil {
		out.Messages = []Message{}
	}
	for i := range out.Messages {
		out.Messages[i].Queue = queue
	}
	return nil
}
