package cell

import "time"

// epoch anchors the default clock: time.Since reads the monotonic clock,
// so neither a member's wall clock nor its steps matter to fencing.
var epoch = time.Now()

// monotonic is the default clock: time elapsed since the process started.
func monotonic() time.Duration { return time.Since(epoch) }
