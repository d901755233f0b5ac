package quality

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// errStreamCut is the error of a stream that ended without [DONE].
const errStreamCut = "stream ended without [DONE]"

// StreamResult is what a client saw of one streamed completion.
type StreamResult struct {
	// TTFT is the time from the request's start to the first chunk that
	// carries generated text (chat's initial empty role delta does not
	// count); 0 when no token arrived.
	TTFT time.Duration
	// End is the time from the start to the end of the stream.
	End time.Duration
	// Tokens is the number of chunks with generated text (modelsim and
	// vLLM send one token per chunk).
	Tokens int
	// UsageTokens and CachedTokens are the final usage chunk's
	// completion_tokens and prompt_tokens_details.cached_tokens, when the
	// server sent one.
	UsageTokens, CachedTokens int
	// Done is true when the stream ended with data: [DONE].
	Done bool
}

type chunk struct {
	Object  string `json:"object"`
	Message string `json:"message"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// ReadStream reads an OpenAI server-sent-event stream from r. start is
// when the request was sent; now is the clock (time.Now outside tests).
// An error event ends the read with an error; so does a stream that ends
// without [DONE].
func ReadStream(r io.Reader, start time.Time, now func() time.Time) (StreamResult, error) {
	var res StreamResult
	br := bufio.NewReaderSize(r, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: keep the whole of it.
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		}
		if data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			if bytes.Equal(data, []byte("[DONE]")) {
				res.Done = true
				res.End = now().Sub(start)
				return res, nil
			}
			var c chunk
			if jerr := json.Unmarshal(data, &c); jerr != nil {
				res.End = now().Sub(start)
				return res, fmt.Errorf("bad event %q: %w", truncate(data), jerr)
			}
			if c.Object == "error" {
				res.End = now().Sub(start)
				return res, fmt.Errorf("error event: %s", c.Message)
			}
			for _, ch := range c.Choices {
				if ch.Text != "" || ch.Delta.Content != "" {
					if res.Tokens == 0 {
						res.TTFT = now().Sub(start)
					}
					res.Tokens++
					break
				}
			}
			if c.Usage != nil {
				res.UsageTokens = c.Usage.CompletionTokens
				if c.Usage.PromptTokensDetails != nil {
					res.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
				}
			}
		}
		if err != nil {
			res.End = now().Sub(start)
			if err == io.EOF {
				return res, errors.New(errStreamCut)
			}
			return res, err
		}
	}
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}
