package idemgrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/memstore"
)

// A gRPC service whose Charge method runs once per idempotency key: the
// client's retry gets the first answer, marked replayed. (ledgerDesc
// registers the method by hand; generated code's RegisterLedgerServer does
// the same.)
func Example() {
	store := memstore.New(memstore.Options{}) // pgstore in production
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(store, idemgrpc.Options{
		Principal: func(ctx context.Context) string { return "tenant-a" }, // the authenticated caller
	})))
	srv.RegisterService(&ledgerDesc, &ledger{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "charge-7")
	for range 2 {
		var header metadata.MD
		out := new(wrapperspb.Int64Value)
		err := cc.Invoke(ctx, "/test.Ledger/Charge", wrapperspb.String("acme"), out, grpc.Header(&header))
		fmt.Println("charge", out.GetValue(), err, "replayed:", header.Get("idempotent-replayed"))
	}
	// Output:
	// charge 1 <nil> replayed: []
	// charge 1 <nil> replayed: [true]
}
