package main

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// dialFlags say how call and bench connect.
type dialFlags struct {
	connectTimeout time.Duration
	fallback       string
}

func (f *dialFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&f.connectTimeout, "connect-timeout", 10*time.Second, "how long to wait for the connection to come up (0: no limit)")
	fl.StringVar(&f.fallback, "fallback", "", `scheme to dial the same address with when no RDMA device serves an rdma:// target ("tcp"); a line on stderr says when it does`)
}

// requestFlags are what call and bench send: the request and its metadata.
type requestFlags struct {
	data    string
	headers []string
}

func (f *requestFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.data, "data", "d", "", "the request as JSON; @ reads it from stdin, @FILE from FILE")
	fl.StringArrayVarP(&f.headers, "header", "H", nil, `request metadata "key: value" (repeatable); a key ending in -bin takes its value in base64`)
}

// checkTarget fails with a usage error when target does not parse (an
// unknown scheme, say): a mistake on the command line, not a failed RPC.
func checkTarget(target string) error {
	if _, _, err := resolver.ParseTarget(target); err != nil {
		return &usageError{err}
	}
	return nil
}

// dial connects to target; warnings (a fallback taken) go to stderr.
func (f *dialFlags) dial(ctx context.Context, target string, stderr io.Writer, opts ...rpc.DialOption) (*rpc.ClientConn, error) {
	if f.connectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.connectTimeout)
		defer cancel()
	}
	log := zap.New(zapcore.NewCore(
		zapcore.NewConsoleEncoder(zapcore.EncoderConfig{MessageKey: "msg", LevelKey: "level", EncodeLevel: zapcore.LowercaseLevelEncoder}),
		zapcore.AddSync(stderr), zapcore.WarnLevel))
	opts = append([]rpc.DialOption{rpc.WithLogger(log)}, opts...)
	if f.fallback != "" {
		opts = append(opts, rpc.WithFallback(f.fallback))
	}
	return rpc.Dial(ctx, target, opts...)
}
