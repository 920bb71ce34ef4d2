package jsonb

import "testing"

func TestIsText(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{"", true},
		{`{"id":1}`, true},
		{"é – ✓", true},
		{"nul\x00inside", false},
		{"\xff", false},         // invalid UTF-8
		{"\xed\xa0\x80", false}, // a UTF-16 surrogate in UTF-8
	} {
		if got := IsText(tt.in); got != tt.want {
			t.Errorf("IsText(%q) = %v, want %v", tt.in, got, tt.want)
		}
		if got := IsText([]byte(tt.in)); got != tt.want {
			t.Errorf("IsText([]byte(%q)) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
