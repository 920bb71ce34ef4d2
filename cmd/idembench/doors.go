package main

// The doors' modes: the invoice insert (http-insert's work) through each
// door to the engine other than net/http, new keys and replays, beside the
// same work through the same transport without idem.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/engine"
	"github.com/idemkit/idem/idemcall"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/middleware"
	"github.com/idemkit/idem/pgstore"
)

const (
	modeCallBare      = "call-bare"
	modeCall          = "call"
	modeCallOnetx     = "call-onetx"
	modeCallReplay    = "call-replay"
	modeGRPCBare      = "grpc-bare"
	modeGRPC          = "grpc"
	modeGRPCReplay    = "grpc-replay"
	modeConnectBare   = "connect-bare"
	modeConnect       = "connect"
	modeConnectReplay = "connect-replay"
	// modeDoors names every door mode, in the order they run.
	modeDoors = "doors"
)

var doorModes = []string{modeCallBare, modeCall, modeCallOnetx, modeCallReplay,
	modeGRPCBare, modeGRPC, modeGRPCReplay, modeConnectBare, modeConnect, modeConnectReplay}

// The procedures of the RPC modes: the same handler, bare and protected.
const (
	procBare = "/bench.Invoices/CreateBare"
	procIdem = "/bench.Invoices/Create"
)

// doors is what the door modes share, set up by the first of them.
type doors struct {
	call, callTx *idemcall.Caller
	grpcCC       *grpc.ClientConn
	connect      *connect.Client[wrapperspb.StringValue, wrapperspb.Int64Value]
	connectBare  *connect.Client[wrapperspb.StringValue, wrapperspb.Int64Value]
	closers      []func()
}

// invoice is the work of every door mode: the invoice row, in the claim's
// transaction when there is one, else in a transaction of its own.
func (b *bench) invoice(ctx context.Context) (int64, error) {
	var id int64
	if tx := pgstore.TxFrom(ctx); tx != nil {
		return id, tx.QueryRow(ctx, b.sql.insertInvoice, "ACME", 12345).Scan(&id)
	}
	return id, insertWork(ctx, b.pool, b.sql)
}

func (b *bench) setupDoors() (*doors, error) {
	if b.doors != nil {
		return b.doors, nil
	}
	d := &doors{}
	b.doors = d
	// The HTTP modes' wait (the middleware's default), so that the doors
	// are measured as the middleware is.
	eng := engine.Options{Owner: "idembench", Wait: middleware.DefaultWait}
	d.call = idemcall.New(b.store, idemcall.Options{Engine: eng})
	d.callTx = idemcall.New(b.store, idemcall.Options{Engine: eng, InTransaction: true})

	// gRPC: one server, the interceptor on procIdem only.
	gs := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(b.store, idemgrpc.Options{
		Engine:    eng,
		Principal: func(context.Context) string { return "idembench" },
		Methods:   func(m string) bool { return m == procIdem },
	})))
	gs.RegisterService(&grpc.ServiceDesc{ServiceName: "bench.Invoices", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{
		grpcMethod(b, "CreateBare", procBare), grpcMethod(b, "Create", procIdem)}}, struct{}{})
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(gl) }()
	d.closers = append(d.closers, func() { gs.Stop(); <-served })
	if d.grpcCC, err = grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return nil, err
	}
	d.closers = append(d.closers, func() { _ = d.grpcCC.Close() })

	// Connect over HTTP/1.1, the same keep-alive client as the HTTP modes.
	create := func(ctx context.Context, _ *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.Int64Value], error) {
		id, err := b.invoice(ctx)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(wrapperspb.Int64(id)), nil
	}
	mux := http.NewServeMux()
	mux.Handle(procBare, connect.NewUnaryHandler(procBare, create))
	mux.Handle(procIdem, connect.NewUnaryHandler(procIdem, create, connect.WithInterceptors(idemconnect.NewInterceptor(b.store, idemconnect.Options{
		Engine:    eng,
		Principal: func(context.Context, connect.AnyRequest) string { return "idembench" },
	}))))
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	cserved := make(chan struct{})
	go func() { defer close(cserved); _ = srv.Serve(cl) }()
	d.closers = append(d.closers, func() { _ = srv.Close(); <-cserved })
	base := "http://" + cl.Addr().String()
	d.connect = connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](b.client, base+procIdem)
	d.connectBare = connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](b.client, base+procBare)
	return d, nil
}

func (b *bench) closeDoors() {
	if b.doors == nil {
		return
	}
	for i := len(b.doors.closers) - 1; i >= 0; i-- {
		b.doors.closers[i]()
	}
}

func grpcMethod(b *bench, name, full string) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, _ any) (any, error) {
			id, err := b.invoice(ctx)
			return wrapperspb.Int64(id), err
		}
		if icpt == nil {
			return h(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: full}, h)
	}}
}

// doorOp is the op of a door mode.
func (b *bench) doorOp(ctx context.Context, mode string) (op, error) {
	d, err := b.setupDoors()
	if err != nil {
		return nil, err
	}
	// one is a call of the mode's door with key ("" for a bare one); it
	// reports whether the answer was replayed.
	var one func(ctx context.Context, key string) (bool, error)
	switch mode {
	case modeCallBare, modeCall, modeCallOnetx, modeCallReplay:
		caller := d.call
		if mode == modeCallOnetx {
			caller = d.callTx
		}
		one = func(ctx context.Context, key string) (bool, error) {
			if key == "" {
				_, err := b.invoice(ctx)
				return false, err
			}
			_, replayed, err := idemcall.Do(ctx, caller, idemcall.Call{Scope: "idembench", Key: key, Fingerprint: benchFingerprint}, b.invoice)
			return replayed, err
		}
	case modeGRPCBare, modeGRPC, modeGRPCReplay:
		one = func(ctx context.Context, key string) (bool, error) {
			proc := procBare
			if key != "" {
				proc, ctx = procIdem, metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
			}
			var header metadata.MD
			err := d.grpcCC.Invoke(ctx, proc, wrapperspb.String("ACME"), new(wrapperspb.Int64Value), grpc.Header(&header))
			return len(header.Get("idempotent-replayed")) > 0, err
		}
	case modeConnectBare, modeConnect, modeConnectReplay:
		one = func(ctx context.Context, key string) (bool, error) {
			client := d.connectBare
			req := connect.NewRequest(wrapperspb.String("ACME"))
			if key != "" {
				client = d.connect
				req.Header().Set("Idempotency-Key", key)
			}
			resp, err := client.CallUnary(ctx, req)
			if err != nil {
				return false, err
			}
			return resp.Header().Get("Idempotent-Replayed") == "true", nil
		}
	default:
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	check := func(replayed, want bool, err error) error {
		if err == nil && replayed != want {
			err = fmt.Errorf("replayed %v, want %v", replayed, want)
		}
		return err
	}
	switch mode {
	case modeCallBare, modeGRPCBare, modeConnectBare:
		return func(ctx context.Context, w *worker) error { r, err := one(ctx, ""); return check(r, false, err) }, nil
	case modeCallReplay, modeGRPCReplay, modeConnectReplay:
		keys := make([]string, b.cfg.replayKeys)
		for i := range keys {
			keys[i] = b.nonce + "-" + mode + "-" + strconv.Itoa(i)
			if r, err := one(ctx, keys[i]); check(r, false, err) != nil {
				return nil, errors.Join(fmt.Errorf("completing the replayed keys"), check(r, false, err))
			}
		}
		return func(ctx context.Context, w *worker) error {
			r, err := one(ctx, keys[w.rng.IntN(len(keys))])
			return check(r, true, err)
		}, nil
	}
	return func(ctx context.Context, w *worker) error {
		r, err := one(ctx, b.newKey(mode, w))
		return check(r, false, err)
	}, nil
}
