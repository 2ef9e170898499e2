// Package bufconn is an in-memory net.Listener for tests, with gRPC-go's
// bufconn API: Listen(size) returns a listener whose DialContext makes a
// connected pair of buffered in-memory connections. A server Serves it like
// any net.Listener (the TCP transport's framing runs over it), and a client
// reaches it with rpc.WithContextDialer:
//
//	lis := bufconn.Listen(1 << 20)
//	go srv.Serve(lis)
//	cc, err := rpc.Dial(ctx, "bufnet", rpc.WithContextDialer(
//		func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
//
// It knows nothing of rdmarpc; transport/pipe is the message-level
// in-memory transport, which skips the framing altogether.
package bufconn
