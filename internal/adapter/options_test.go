package adapter

import (
	"strings"
	"testing"
)

func TestPositivePanicsNamingTheField(t *testing.T) {
	if msg := panicMessage(func() { Positive("mypkg", "MaxBodyBytes", int64(-1), 10) }); !strings.HasPrefix(msg, "mypkg: Options.MaxBodyBytes") {
		t.Errorf("Positive: panic %q", msg)
	}
	if got := Positive("mypkg", "MaxBodyBytes", 0, 10); got != 10 {
		t.Errorf("Positive(0) = %d, want the default", got)
	}
	if msg := panicMessage(func() { NewScoper("mypkg", Scoping{SessionCookies: []string{"bad name"}}, nil) }); !strings.HasPrefix(msg, "mypkg: Options.SessionCookies") {
		t.Errorf("Scoper: panic %q", msg)
	}
}

func panicMessage(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg, _ = r.(string)
			if msg == "" {
				msg = "non-string panic"
			}
		}
	}()
	f()
	return ""
}
