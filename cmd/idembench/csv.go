package main

import (
	"encoding/csv"
	"os"
	"strconv"
	"time"
)

// csvOut writes one row per measurement, for charts:
//
//	series,clients,instances,metric,value,unit
//	unique,16,1,throughput,2150,req/s
//	unique,16,1,ratio,0.85,of floor
//	unique,16,1,ratio-http,0.9,of http-floor
//	demo-onetx,16,1,ratio-insert,0.85,of http-insert
//	wait-wake-8,16,3,p99,4.2,ms
//
// series is the mode; the wait mode writes "wait-wake-W" (a waiter's wake
// after the commit) and "complete-waiters-W" (Complete's own latency) for W
// waiters per key, so that charts of wait* series show wake latencies only,
// and "wait-onetx-wake-W" and "onetx-complete-waiters-W" for the one-commit
// path. clients is -concurrency, or, for the one-commit path's waits, the
// keys in flight at once; instances is 1 except in the wait mode. A nil
// *csvOut (no -csv) writes nothing.
type csvOut struct {
	f   *os.File
	w   *csv.Writer
	err error
}

func openCSV(path string) (*csvOut, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	o := &csvOut{f: f, w: csv.NewWriter(f)}
	o.row("series", "clients", "instances", "metric", "value", "unit")
	return o, nil
}

func (o *csvOut) row(fields ...string) {
	if o != nil && o.err == nil {
		o.err = o.w.Write(fields)
	}
}

func (o *csvOut) measure(series string, clients, instances int, metric string, value float64, unit string) {
	o.row(series, strconv.Itoa(clients), strconv.Itoa(instances), metric, strconv.FormatFloat(value, 'f', -1, 64), unit)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (o *csvOut) results(cfg config, rs []result) {
	byMode := map[string]result{}
	for _, r := range rs {
		byMode[r.mode] = r
	}
	for _, r := range rs {
		o.measure(r.mode, cfg.concurrency, 1, "throughput", float64(int64(r.throughput()+0.5)), "req/s")
		o.measure(r.mode, cfg.concurrency, 1, "p50", ms(r.p50), "ms")
		o.measure(r.mode, cfg.concurrency, 1, "p99", ms(r.p99), "ms")
		for _, c := range []struct {
			metric string
			base   map[string]string
		}{{"ratio", ratioBase}, {"ratio-http", httpRatioBase}, {"ratio-insert", insertRatioBase}} {
			if v, of, ok := ratio(byMode, r, c.base); ok {
				o.measure(r.mode, cfg.concurrency, 1, c.metric, float64(int64(1000*v+0.5))/1000, "of "+of)
			}
		}
	}
}

func (o *csvOut) wait(cfg config, rs []waitResult) {
	for _, r := range rs {
		complete, wake := "complete-waiters-", "wait-wake-"
		if r.onetx {
			complete, wake = "onetx-complete-waiters-", "wait-onetx-wake-"
		}
		series := complete + strconv.Itoa(r.waiters)
		o.measure(series, r.clients, r.instances, "p50", ms(percentile(r.complete, 0.50)), "ms")
		o.measure(series, r.clients, r.instances, "p99", ms(percentile(r.complete, 0.99)), "ms")
		if r.waiters > 0 {
			series = wake + strconv.Itoa(r.waiters)
			o.measure(series, r.clients, r.instances, "p50", ms(percentile(r.wake, 0.50)), "ms")
			o.measure(series, r.clients, r.instances, "p99", ms(percentile(r.wake, 0.99)), "ms")
		}
	}
}

// close flushes and closes the file, once; it reports the first error.
func (o *csvOut) close() error {
	if o == nil || o.f == nil {
		return nil
	}
	o.w.Flush()
	if o.err == nil {
		o.err = o.w.Error()
	}
	if err := o.f.Close(); o.err == nil {
		o.err = err
	}
	o.f = nil
	return o.err
}
