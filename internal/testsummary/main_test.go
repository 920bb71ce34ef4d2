package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	t.Parallel()
	const pkg = `"Package":"example.com/p"`
	in := strings.Join([]string{
		`{"Action":"run",` + pkg + `,"Test":"TestA"}`,
		`{"Action":"output",` + pkg + `,"Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output",` + pkg + `,"Test":"TestA","Output":"    a_test.go:12: no PostgreSQL: TEST_DATABASE_URL is not set\n"}`,
		`{"Action":"output",` + pkg + `,"Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}`,
		`{"Action":"skip",` + pkg + `,"Test":"TestA"}`,
		`{"Action":"output",` + pkg + `,"Test":"TestB","Output":"    b_test.go:3: no PostgreSQL: TEST_DATABASE_URL is not set\n"}`,
		`{"Action":"skip",` + pkg + `,"Test":"TestB"}`,
		`{"Action":"output",` + pkg + `,"Test":"TestC","Output":"    c_test.go:9: short mode\n"}`,
		`{"Action":"skip",` + pkg + `,"Test":"TestC"}`,
		`{"Action":"output",` + pkg + `,"Test":"TestD","Output":"quiet when passing\n"}`,
		`{"Action":"pass",` + pkg + `,"Test":"TestD"}`,
		`{"Action":"output",` + pkg + `,"Test":"TestE","Output":"    e_test.go:1: got 2, want 1\n"}`,
		`{"Action":"fail",` + pkg + `,"Test":"TestE"}`,
		`{"Action":"output",` + pkg + `,"Output":"PASS\n"}`,
		`{"Action":"output",` + pkg + `,"Output":"FAIL\texample.com/p\t0.1s\n"}`,
		`{"Action":"fail",` + pkg + `}`,
		`not json: printed as is`,
	}, "\n")
	var out bytes.Buffer
	s := newSummary(&out)
	if err := s.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	s.finish()
	want := "    e_test.go:1: got 2, want 1\n" +
		"FAIL\texample.com/p\t0.1s\n" +
		"not json: printed as is\n" +
		"SKIPPED 3 tests, by reason:\n" +
		"  2 × no PostgreSQL: TEST_DATABASE_URL is not set: p.TestA, p.TestB\n" +
		"  1 × short mode: p.TestC\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	if !s.failed {
		t.Error("a failed test did not fail the summary")
	}
}

func TestSummaryPassingRunSaysNothingMore(t *testing.T) {
	t.Parallel()
	in := `{"Action":"output","Package":"p","Test":"TestA","Output":"log line\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
{"Action":"pass","Package":"p"}
{"Action":"skip","Package":"q"}`
	var out bytes.Buffer
	s := newSummary(&out)
	if err := s.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	s.finish()
	if got, want := out.String(), "ok  \tp\t0.1s\n"; got != want || s.failed {
		t.Errorf("output %q (failed %v), want %q", got, s.failed, want)
	}
}

// A reason shared by many tests names the first few and counts the rest,
// so that the summary stays a few lines long.
func TestSummaryNamesAFewTestsPerReason(t *testing.T) {
	t.Parallel()
	var in strings.Builder
	for i := range 9 {
		fmt.Fprintf(&in, `{"Action":"output","Package":"example.com/ha","Test":"Test%d","Output":"    x_test.go:1: needs IDEM_TEST_HA=1\n"}`+"\n", i)
		fmt.Fprintf(&in, `{"Action":"skip","Package":"example.com/ha","Test":"Test%d"}`+"\n", i)
	}
	var out bytes.Buffer
	s := newSummary(&out)
	if err := s.read(strings.NewReader(in.String())); err != nil {
		t.Fatal(err)
	}
	s.finish()
	want := "SKIPPED 9 tests, by reason:\n" +
		"  9 × needs IDEM_TEST_HA=1: ha.Test0, ha.Test1, ha.Test2, ha.Test3, ha.Test4, ha.Test5 and 3 more\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
