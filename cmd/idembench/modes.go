package main

// The modes: the work each one measures, over HTTP or straight through
// pgx and pgstore (the floors' SQL is in floor.go, the wait mode in
// wait.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/middleware"
)

// Modes, in the order "all" runs them. "wait" is not part of "all": it
// measures latency, one configuration at a time (see wait.go).
const (
	modeFloor         = "floor"
	modeHTTPFloor     = "http-floor"
	modeStore         = "store"
	modeHTTPBare      = "http-bare"
	modeUnique        = "unique"
	modeReplay        = "replay"
	modeMixed         = "mixed"
	modeDemoFloor     = "demo-floor"
	modeHTTPDemoFloor = "http-demo-floor"
	modeDemo          = "demo"
	modeHTTPInsert    = "http-insert"
	modeHTTPOnetxFlr  = "http-onetx-floor"
	modeHTTPMinimum   = "http-minimum"
	modeDemoOnetx     = "demo-onetx"
	modeDemoOnetxSQL  = "demo-onetx-sql"
	modeWait          = "wait"
)

var allModes = []string{modeFloor, modeHTTPFloor, modeStore, modeHTTPBare, modeUnique, modeReplay, modeMixed,
	modeDemoFloor, modeHTTPDemoFloor, modeDemo, modeHTTPInsert, modeHTTPOnetxFlr, modeHTTPMinimum, modeDemoOnetx, modeDemoOnetxSQL}

// The request every HTTP mode sends, and the response the handler gives.
const (
	requestBody    = `{"customer":"ACME","amount_cents":12345}`
	responseBody   = `{"id":"inv_0000000000","customer":"ACME","amount_cents":12345}`
	pathBare       = "/bare"
	pathIdem       = "/idem"
	pathDemo       = "/demo"
	pathFloor      = "/floor"
	pathDemoFloor  = "/demo-floor"
	pathInsert     = "/insert"
	pathOnetxFloor = "/onetx-floor"
	pathMinimum    = "/minimum"
	pathDemoOnetx  = "/demo-onetx"
	pathDemoOnetxS = "/demo-onetx-sql"
)

// handler is the service's side effect: a small JSON 201, the same bare and
// protected.
func handler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(responseBody)))
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, responseBody)
}

// recordedResult is what the middleware records for handler's response, so
// store and floor write what unique writes.
var recordedResult = idem.Result{
	Status: http.StatusCreated,
	Header: map[string][]string{"Content-Type": {"application/json"}},
	Body:   []byte(responseBody),
}

func (b *bench) newKey(mode string, w *worker) string {
	w.seq++
	return b.nonce + "-" + mode + "-" + strconv.Itoa(w.id) + "-" + strconv.FormatUint(w.seq, 10)
}

func (b *bench) opFor(ctx context.Context, mode string) (op, error) {
	switch mode {
	case modeFloor:
		return b.floorOp(false), nil
	case modeDemoFloor:
		return b.floorOp(true), nil
	case modeHTTPFloor, modeHTTPDemoFloor, modeHTTPInsert, modeHTTPOnetxFlr, modeHTTPMinimum, modeDemoOnetx, modeDemoOnetxSQL:
		path := map[string]string{modeHTTPFloor: pathFloor, modeHTTPDemoFloor: pathDemoFloor,
			modeHTTPInsert: pathInsert, modeHTTPOnetxFlr: pathOnetxFloor, modeHTTPMinimum: pathMinimum, modeDemoOnetx: pathDemoOnetx,
			modeDemoOnetxSQL: pathDemoOnetxS}[mode]
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, path, b.newKey(mode, w), false)
		}, nil
	case modeDemo:
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, pathDemo, b.newKey(mode, w), false)
		}, nil
	case modeStore:
		return func(ctx context.Context, w *worker) error {
			key, err := idem.ParseClientKey(b.newKey(mode, w))
			if err != nil {
				return err
			}
			c, err := b.store.Claim(ctx, idem.ClaimRequest{Scope: "idembench", Key: key, Fingerprint: benchFingerprint, Owner: "idembench"})
			if err != nil {
				return err
			}
			if c.Status != idem.Acquired {
				return fmt.Errorf("claim of a new key: %v", c.Status)
			}
			return b.store.Complete(ctx, c.Token, recordedResult)
		}, nil
	case modeHTTPBare:
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, pathBare, b.newKey(mode, w), false)
		}, nil
	case modeUnique:
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, pathIdem, b.newKey(mode, w), false)
		}, nil
	case modeReplay:
		keys := make([]string, b.cfg.replayKeys)
		for i := range keys {
			keys[i] = b.nonce + "-replay-" + strconv.Itoa(i)
			if err := b.post(ctx, pathIdem, keys[i], false); err != nil {
				return nil, fmt.Errorf("completing the replayed keys: %w", err)
			}
		}
		return func(ctx context.Context, w *worker) error {
			return b.post(ctx, pathIdem, keys[w.rng.IntN(len(keys))], true)
		}, nil
	case modeMixed:
		const remembered = 64
		return func(ctx context.Context, w *worker) error {
			if len(w.recent) > 0 && w.rng.Float64() < b.cfg.retryShare {
				return b.post(ctx, pathIdem, w.recent[w.rng.IntN(len(w.recent))], true)
			}
			key := b.newKey(mode, w)
			if err := b.post(ctx, pathIdem, key, false); err != nil {
				return err
			}
			if len(w.recent) == remembered {
				w.recent = append(w.recent[:0], w.recent[1:]...)
			}
			w.recent = append(w.recent, key)
			return nil
		}, nil
	}
	if slices.Contains(doorModes, mode) {
		return b.doorOp(ctx, mode)
	}
	return nil, fmt.Errorf("unknown mode %q", mode)
}

// benchFingerprint has the length of the middleware's (hex SHA-256), so
// store and floor write rows of the same size as unique.
var benchFingerprint = strings.Repeat("f", 64)

// post sends the request and checks the answer: 201 with the handler's body,
// replayed or not as expected.
func (b *bench) post(ctx context.Context, path, key string, replayed bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+path, strings.NewReader(requestBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf [256]byte
	n, err := io.ReadFull(resp.Body, buf[:])
	switch {
	case err == nil:
		return fmt.Errorf("%s: response body longer than expected", path)
	case !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF):
		return err
	case resp.StatusCode != http.StatusCreated:
		return fmt.Errorf("%s: status %d: %s", path, resp.StatusCode, buf[:n])
	case !bytes.Equal(buf[:n], []byte(responseBody)):
		return fmt.Errorf("%s: unexpected body %q", path, buf[:n])
	case (resp.Header.Get(middleware.ReplayedHeader) == "true") != replayed:
		return fmt.Errorf("%s: %s = %q, want replayed %v", path, middleware.ReplayedHeader, resp.Header.Get(middleware.ReplayedHeader), replayed)
	}
	return nil
}
