package middleware_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/middleware"
)

type senderKey struct{}

// A webhook receiver: each message runs its handler once however often the
// sender redelivers it. The key is the Standard Webhooks webhook-id header
// (WebhookKey), and keys are scoped by the sender the signature check
// verified (Principal), so one sender's message ids never meet another's.
// The check runs first: an unsigned delivery claims nothing.
func ExampleWebhookKey() {
	secrets := map[string][]byte{"billing": []byte("billing-secret"), "shipping": []byte("shipping-secret")}

	// verify checks the Standard Webhooks signature of a delivery to
	// /webhooks/{sender} with that sender's secret, and puts the sender in
	// the context. (In production, use a Standard Webhooks library, and
	// secrets from your secret store.)
	verify := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sender := r.PathValue("sender")
			body, err := io.ReadAll(r.Body)
			secret, known := secrets[sender]
			if err != nil || !known || !validSignature(secret, r.Header, body, time.Now()) {
				http.Error(w, "bad signature", http.StatusUnauthorized)
				return
			}
			r.Body = io.NopCloser(strings.NewReader(string(body))) // for the middleware and the handler
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), senderKey{}, sender)))
		})
	}
	dedupe := middleware.New(memstore.New(memstore.Options{}), middleware.Options{
		Key: middleware.WebhookKey,
		Principal: func(r *http.Request) string {
			sender, _ := r.Context().Value(senderKey{}).(string)
			return sender
		},
	})
	processed := 0
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/{sender}", verify(dedupe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		processed++
		fmt.Fprintf(w, "processed %s from %s (%d)\n", r.Header.Get("webhook-id"), r.PathValue("sender"), processed)
	}))))

	deliver := func(sender, id, signWith string, headers ...string) {
		body := `{"type":"invoice.paid"}`
		r := httptest.NewRequest(http.MethodPost, "/webhooks/"+sender, strings.NewReader(body))
		if id != "" {
			r.Header.Set("webhook-id", id)
		}
		sign(r.Header, []byte(signWith), id, body, time.Now())
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Printf("%s %s: %d %s", sender, id, w.Code, w.Body)
		if w.Header().Get("Idempotent-Replayed") == "true" {
			fmt.Println("  (replayed)")
		}
	}
	deliver("billing", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "billing-secret")
	deliver("billing", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "billing-secret") // redelivered
	deliver("shipping", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "shipping-secret")
	deliver("shipping", "msg_forged", "a guess")
	deliver("billing", "", "billing-secret")
	// Output:
	// billing msg_2KWPBgLlAfxdpx2AI54pPJ85f4W: 200 processed msg_2KWPBgLlAfxdpx2AI54pPJ85f4W from billing (1)
	// billing msg_2KWPBgLlAfxdpx2AI54pPJ85f4W: 200 processed msg_2KWPBgLlAfxdpx2AI54pPJ85f4W from billing (1)
	//   (replayed)
	// shipping msg_2KWPBgLlAfxdpx2AI54pPJ85f4W: 200 processed msg_2KWPBgLlAfxdpx2AI54pPJ85f4W from shipping (2)
	// shipping msg_forged: 401 bad signature
	// billing : 400 {"type":"https://pkg.go.dev/github.com/idemkit/idem/middleware#TypeMissingKey","title":"Idempotency-Key required","status":400,"detail":"POST requests must carry a webhook-id header, so that a retry does not run them twice."}
}

// sign sets the Standard Webhooks headers of a delivery: webhook-timestamp,
// and webhook-signature, "v1," and the base64 HMAC-SHA256 of
// "id.timestamp.body".
func sign(h http.Header, secret []byte, id, body string, now time.Time) {
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id + "." + ts + "." + body))
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// validSignature checks a delivery's signature, and that its timestamp is
// within five minutes of now (an old delivery replayed by an attacker is
// refused).
func validSignature(secret []byte, h http.Header, body []byte, now time.Time) bool {
	ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	if err != nil || now.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "." + string(body)))
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(h.Get("webhook-signature")) { // space-separated, one per active secret
		if b64, ok := strings.CutPrefix(sig, "v1,"); ok {
			if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}
