package requests

import (
	"bytes"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// MaxSSELineBytes bounds the partial line an SSEScanner keeps between
// chunks. A line longer than this (without its line feed) is skipped, not
// buffered, wherever the chunk boundaries fall.
const MaxSSELineBytes = 1 << 20

// SSEScanner reads token usage and the end of the stream from a
// server-sent-events response body fed chunk by chunk. Chunks may split
// lines at any byte; the result does not depend on where.
//
// It reads "data:" lines (one optional space after the colon; lines end
// with "\n" or "\r\n"; each data line is read on its own, as GIE v1.5
// does, so a JSON payload split over several data lines is not read):
//   - "data: [DONE]" ends an OpenAI stream;
//   - a JSON object with a non-null top-level "usage" (OpenAI's last chunk
//     with stream_options.include_usage, or every chunk with vLLM's
//     continuous usage stats) replaces the usage seen so far;
//   - Responses API "response.completed", "response.incomplete" and
//     "response.failed" events give response.usage and end the stream;
//   - Anthropic "message_start" gives message.usage (input, cache reads
//     and writes, output so far), each "message_delta" updates the counts
//     its usage holds (output_tokens, and input counts when present), and
//     "message_stop" ends the stream. Counts convert as ParseUsage does.
//
// Other lines (event:, id:, comments, other JSON events) are ignored.
// The zero value is ready to use; an SSEScanner is not safe for
// concurrent use.
type SSEScanner struct {
	partial  []byte
	skipping bool
	usage    scheduling.Usage
	have     bool
	done     bool
	// Anthropic counts, accumulated over message_start and message_delta.
	anth usageFields
}

// Feed reads the next chunk of the stream. The scanner keeps no reference
// to chunk.
func (s *SSEScanner) Feed(chunk []byte) {
	for len(chunk) > 0 {
		nl := bytes.IndexByte(chunk, '\n')
		if nl < 0 {
			if s.skipping {
				return
			}
			if len(s.partial)+len(chunk) > MaxSSELineBytes {
				s.skipping = true
				s.partial = s.partial[:0]
				return
			}
			s.partial = append(s.partial, chunk...)
			return
		}
		line := chunk[:nl]
		chunk = chunk[nl+1:]
		switch {
		case s.skipping:
			s.skipping = false
		case len(s.partial) > 0:
			if len(s.partial)+len(line) <= MaxSSELineBytes {
				s.partial = append(s.partial, line...)
				s.line(s.partial)
			}
			s.partial = s.partial[:0]
		case len(line) <= MaxSSELineBytes:
			s.line(line)
		}
	}
}

// Usage returns the usage read so far, and whether any was.
func (s *SSEScanner) Usage() (scheduling.Usage, bool) { return s.usage, s.have }

// Done reports whether the stream's end marker was seen: "data: [DONE]"
// (OpenAI), "message_stop" (Anthropic), or a terminal Responses API event
// (response.completed, response.incomplete, response.failed).
func (s *SSEScanner) Done() bool { return s.done }

// Reset makes the scanner ready for a new stream. It keeps its line
// buffer unless that grew beyond 64 KiB.
func (s *SSEScanner) Reset() {
	buf := s.partial[:0]
	if cap(buf) > 64<<10 {
		buf = nil
	}
	*s = SSEScanner{partial: buf}
}

var markDataColon = []byte("data:")

// Names whose presence makes a data payload worth decoding, each with its
// closing quote; worthDecoding finds them after an opening quote.
var (
	markUsage      = []byte(`usage"`)
	markStop       = []byte(`message_stop"`)
	markCompleted  = []byte(`response.completed"`)
	markIncomplete = []byte(`response.incomplete"`)
	markFailed     = []byte(`response.failed"`)
)

// worthDecoding reports whether a data payload may carry usage or an end
// marker, looking only after each quote: a quote appears unescaped in JSON
// only as a string's delimiter, so "usage" is found as a key (or a string
// value "usage"), never as text inside a string. OpenAI sends "usage":null
// in every chunk when include_usage is set; such payloads are skipped
// without decoding. A false positive only costs a decode.
func worthDecoding(p []byte) bool {
	for i := 0; ; {
		k := bytes.IndexByte(p[i:], '"')
		if k < 0 {
			return false
		}
		i += k + 1
		rest := p[i:]
		if len(rest) == 0 {
			return false
		}
		switch rest[0] {
		case 'u':
			if !bytes.HasPrefix(rest, markUsage) {
				continue
			}
			after := rest[len(markUsage):]
			j := skipWS(after, 0)
			if j >= len(after) || after[j] != ':' {
				return true // not a key: let the decoder decide
			}
			j = skipWS(after, j+1)
			if j >= len(after) || after[j] != 'n' {
				return true
			}
		case 'm':
			if bytes.HasPrefix(rest, markStop) {
				return true
			}
		case 'r':
			if bytes.HasPrefix(rest, markCompleted) || bytes.HasPrefix(rest, markIncomplete) || bytes.HasPrefix(rest, markFailed) {
				return true
			}
		}
	}
}

// line handles one complete line (without its "\n").
func (s *SSEScanner) line(l []byte) {
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	if !bytes.HasPrefix(l, markDataColon) {
		return
	}
	p := l[len(markDataColon):]
	if len(p) > 0 && p[0] == ' ' {
		p = p[1:]
	}
	p = bytes.TrimRight(p, " \t")
	if string(p) == "[DONE]" {
		s.done = true
		return
	}
	if len(p) == 0 || p[0] != '{' {
		return
	}
	if !worthDecoding(p) {
		return
	}
	if !validJSON(p) {
		return
	}
	s.event(p)
}

// event handles one JSON data payload.
func (s *SSEScanner) event(obj []byte) {
	// line checked that obj is valid JSON.
	v, _ := pickMembers(obj, "type", "usage", "response", "message")
	typ, usage, response, message := v[0], v[1], v[2], v[3]
	switch string(typ) {
	case `"message_start"`:
		f := readUsage(member(message, "usage"))
		if f.any() {
			s.anth = f
			s.setAnthropic()
		}
		return
	case `"message_delta"`:
		f := readUsage(usage)
		if f.any() {
			s.anth.update(&f)
			s.setAnthropic()
		}
		return
	case `"message_stop"`:
		s.done = true
		return
	case `"response.completed"`, `"response.incomplete"`, `"response.failed"`:
		f := readUsage(member(response, "usage"))
		if f.any() {
			s.usage, s.have = f.openAIUsage(), true
		}
		s.done = true
		return
	}
	f := readUsage(usage)
	if !f.any() {
		return
	}
	if f.anthropicShaped() {
		s.usage = f.anthropicUsage()
	} else {
		s.usage = f.openAIUsage()
	}
	s.have = true
}

// setAnthropic recomputes the usage from the Anthropic counts.
func (s *SSEScanner) setAnthropic() {
	s.usage = s.anth.anthropicUsage()
	s.have = true
}
