package idemconnect_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/memstore"
)

// A Connect procedure that runs once per idempotency key: the client's
// retry gets the first answer, marked replayed.
func Example() {
	store := memstore.New(memstore.Options{}) // pgstore in production
	idem := idemconnect.NewInterceptor(store, idemconnect.Options{
		Principal: func(ctx context.Context, req connect.AnyRequest) string { return "tenant-a" }, // the authenticated caller
	})
	mux := http.NewServeMux()
	mux.Handle("/test.Ledger/Charge", connect.NewUnaryHandler("/test.Ledger/Charge", (&ledger{}).charge, connect.WithInterceptors(idem)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](srv.Client(), srv.URL+"/test.Ledger/Charge")
	for range 2 {
		req := connect.NewRequest(wrapperspb.String("acme"))
		req.Header().Set("Idempotency-Key", "charge-7")
		resp, err := client.CallUnary(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("charge %d replayed: %q\n", resp.Msg.GetValue(), resp.Header().Get("Idempotent-Replayed"))
	}
	// Output:
	// charge 1 replayed: ""
	// charge 1 replayed: "true"
}
