package tokenauth

import (
	"bytes"
	"testing"
)

// FuzzParseToken: any content gives a token or an error, never a panic;
// an accepted token is printable, trimmed, within the bounds, and the
// bytes a request would have to send.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"0123456789abcdef0123456789abcdef\n", "", "short", " \t\r\n", "0123456789 abcdef0123", "0123456789abcdef\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		tok, err := ParseToken(raw)
		if err != nil {
			if tok != nil {
				t.Fatal("a token with an error")
			}
			return
		}
		if len(tok) < MinTokenBytes || len(tok) > MaxTokenBytes || !bytes.Equal(tok, bytes.TrimSpace(tok)) {
			t.Fatalf("accepted %q", tok)
		}
		for _, c := range tok {
			if c <= ' ' || c > '~' {
				t.Fatalf("accepted byte %q", c)
			}
		}
		if !bytes.Contains(raw, tok) {
			t.Fatal("the token is not from the file")
		}
	})
}
