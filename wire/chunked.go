package wire

// Chunked transfer coding (RFC 9112 7.1), decoded incrementally into the
// parser's reused body buffer as the bytes arrive, so a body that comes in
// many reads is copied once and its framing is examined once.

// chunk advances through a chunked body. done reports a complete request;
// more that the caller's loop should continue with the next stage.
func (p *Parser) chunk(buf []byte, lim Limits) (done, more bool, err *Error) {
	switch p.stage {
	case stageChunkSize:
		// A chunk-size line may be at most maxChunkLine bytes before its CRLF.
		win, over := headWindow(buf, p.pos, maxChunkLine+2)
		line, lf, ok, err := p.nextLine(win, "a chunk-size line")
		if err != nil {
			return false, false, err
		}
		if !ok {
			if over {
				return false, false, framingError("chunk-size line exceeds %d bytes", maxChunkLine)
			}
			return false, false, nil
		}
		size, err := chunkSize(line, lim.MaxBody)
		if err != nil {
			return false, false, err
		}
		if size > lim.MaxBody-int64(len(p.body)) {
			return false, false, framingError("chunked body exceeds the body limit of %d bytes (QUEEN_MAX_BODY_BYTES)", lim.MaxBody)
		}
		p.framing += lf + 1 - p.pos
		if p.framing > maxChunkFraming {
			return false, false, framingError("chunked framing exceeds %d bytes; send larger chunks", maxChunkFraming)
		}
		p.pos, p.scan = lf+1, lf+1
		if size == 0 {
			p.stage, p.trailerStart, p.nTrl = stageTrailers, p.pos, 0
		} else {
			p.stage, p.chunkLeft = stageChunkData, size
		}
		return false, true, nil

	case stageChunkData:
		n := min(int64(len(buf)-p.pos), p.chunkLeft)
		p.body = append(p.body, buf[p.pos:p.pos+int(n)]...)
		p.pos += int(n)
		p.chunkLeft -= n
		if p.chunkLeft > 0 {
			return false, false, nil
		}
		p.stage = stageChunkEnd
		return false, true, nil

	case stageChunkEnd:
		if len(buf)-p.pos < 2 {
			if len(buf)-p.pos == 1 && buf[p.pos] != '\r' {
				return false, false, framingError("chunk data is not followed by CRLF")
			}
			return false, false, nil
		}
		if buf[p.pos] != '\r' || buf[p.pos+1] != '\n' {
			return false, false, framingError("chunk data is not followed by CRLF")
		}
		p.pos += 2
		p.scan = p.pos
		p.framing += 2
		p.stage = stageChunkSize
		return false, true, nil
	}

	// stageTrailers: header-like lines up to a blank line; checked like
	// headers and then ignored (nothing here is allowed to frame or route).
	win, over := headWindow(buf, p.trailerStart, lim.MaxHeaderBytes)
	line, lf, ok, err := p.nextLine(win, "the trailer section")
	if err != nil {
		return false, false, err
	}
	if !ok {
		if over {
			return false, false, framingError("trailer section exceeds %d bytes", lim.MaxHeaderBytes)
		}
		return false, false, nil
	}
	p.pos, p.scan = lf+1, lf+1
	if len(line) == 0 {
		return true, false, nil
	}
	if _, _, _, err := fieldLine(line, "trailer"); err != nil {
		return false, false, err
	}
	if p.nTrl++; p.nTrl > lim.MaxHeaders {
		return false, false, framingError("more than %d trailer lines", lim.MaxHeaders)
	}
	return false, true, nil
}

// chunkSize parses a chunk-size line without its CRLF:
//
//	chunk-size [ chunk-ext ]; chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )
//
// Sizes above limit saturate at limit+1 (the caller refuses them).
func chunkSize(line []byte, limit int64) (int64, *Error) {
	i := 0
	var n int64
	for i < len(line) && hexVal[line[i]] >= 0 {
		if n <= limit {
			n = n<<4 | int64(hexVal[line[i]])
		}
		i++
	}
	if i == 0 {
		return 0, framingError("chunk size is not hexadecimal")
	}
	if n > limit {
		n = limit + 1
	}
	if !chunkExt(line[i:]) {
		return 0, framingError("malformed chunk extension")
	}
	return n, nil
}

// chunkExt reports whether s is well-formed chunk extensions. They carry
// nothing we use but must still parse: a lenient reading of them is a
// smuggling vector.
func chunkExt(s []byte) bool {
	ws := func(i int) int {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		return i
	}
	token := func(i int) int {
		for i < len(s) && isTchar[s[i]] {
			i++
		}
		return i
	}
	for i := 0; i < len(s); {
		if i = ws(i); i == len(s) || s[i] != ';' {
			return false
		}
		j := token(ws(i + 1))
		if j == ws(i+1) {
			return false
		}
		i = j
		if k := ws(i); k < len(s) && s[k] == '=' {
			k = ws(k + 1)
			if k < len(s) && s[k] == '"' {
				end, ok := quotedString(s, k)
				if !ok {
					return false
				}
				i = end
			} else {
				if j = token(k); j == k {
					return false
				}
				i = j
			}
		}
	}
	return true
}

// quotedString returns the index after the quoted-string that starts at
// s[i] == '"' (RFC 9110 5.6.4).
func quotedString(s []byte, i int) (int, bool) {
	for i++; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 == len(s) || !isFieldValue[s[i+1]] {
				return 0, false
			}
			i++
		case !isFieldValue[c]:
			return 0, false
		}
	}
	return 0, false
}
