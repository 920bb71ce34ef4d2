package adapter

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/engine"
)

func TestCommonEngineDefaults(t *testing.T) {
	o := Common{}.Engine("pkg", "http", 5*time.Second)
	if o.Lease != idem.DefaultLease || o.Wait != 5*time.Second || o.StoreTimeout != engine.DefaultStoreTimeout ||
		o.RetryAfter != engine.DefaultRetryAfter || o.Logger == nil || o.Adapter != "http" {
		t.Fatalf("defaults: %+v", o)
	}
	if o := (Common{Wait: -1}).Engine("pkg", "http", 5*time.Second); o.Wait != 0 {
		t.Errorf("a negative Wait gave %v, want no wait", o.Wait)
	}
	if o := (Common{Wait: time.Second, Lease: time.Minute}).Engine("pkg", "http", 5*time.Second); o.Wait != time.Second || o.Lease != time.Minute {
		t.Errorf("set values not kept: %+v", o)
	}
}

func TestCommonEnginePanicsNamingTheField(t *testing.T) {
	for field, c := range map[string]Common{
		"Lease":             {Lease: -time.Second},
		"StoreTimeout":      {StoreTimeout: -1},
		"RetryAfter":        {RetryAfter: -1},
		"IdleInTransaction": {IdleInTransaction: -1},
	} {
		msg := panicMessage(func() { c.Engine("mypkg", "http", time.Second) })
		if !strings.HasPrefix(msg, "mypkg: Options."+field) {
			t.Errorf("%s: panic %q", field, msg)
		}
	}
	if msg := panicMessage(func() { Common{Lease: time.Microsecond}.Engine("mypkg", "http", time.Second) }); !strings.Contains(msg, "Options.Lease") {
		t.Errorf("sub-millisecond lease: panic %q", msg)
	}
	if msg := panicMessage(func() { Positive("mypkg", "MaxBodyBytes", int64(-1), 10) }); !strings.HasPrefix(msg, "mypkg: Options.MaxBodyBytes") {
		t.Errorf("Positive: panic %q", msg)
	}
	if got := Positive("mypkg", "MaxBodyBytes", 0, 10); got != 10 {
		t.Errorf("Positive(0) = %d, want the default", got)
	}
	if msg := panicMessage(func() { Common{SessionCookies: []string{"bad name"}}.Scoper("mypkg", nil) }); !strings.HasPrefix(msg, "mypkg: Options.SessionCookies") {
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
