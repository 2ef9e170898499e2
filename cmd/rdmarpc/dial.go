package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport/rdma"
)

// dialFlags say how call and bench connect.
type dialFlags struct {
	connectTimeout time.Duration
	fallback       string
	rdmaDevices    []string
	rdmaNetdevs    []string
	rdmaGIDIndex   int
}

func (f *dialFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&f.connectTimeout, "connect-timeout", 10*time.Second, "how long to wait for the connection to come up (0: no limit)")
	fl.StringVar(&f.fallback, "fallback", "", `scheme to dial the same address with when no RDMA device serves an rdma:// target ("tcp"); a line on stderr says when it does`)
	fl.StringArrayVar(&f.rdmaDevices, "rdma-device", nil, "local RDMA device (mlx5_0) or device port (mlx5_0:1) an rdma:// target may be reached through, repeatable; default every ACTIVE port (rdma.Options.Devices)")
	fl.StringArrayVar(&f.rdmaNetdevs, "rdma-netdev", nil, "use the local RoCE ports whose GID belongs to this network interface (net1), repeatable (rdma.Options.Netdevs)")
	fl.IntVar(&f.rdmaGIDIndex, "rdma-gid-index", 0, "GID table entry to use; 0: the RoCE v2 GID of an IPv4 address (rdma.Options.GIDIndex)")
}

// rdmaOption is the dial option of the --rdma-* flags for target: the RDMA
// transport with those Options, nil when none is given. With one given, a
// target not dialed over rdma:// is a usage error.
func (f *dialFlags) rdmaOption(target string) (rpc.DialOption, error) {
	o := rdma.Options{Devices: f.rdmaDevices, Netdevs: f.rdmaNetdevs, GIDIndex: f.rdmaGIDIndex}
	if len(o.Devices) == 0 && len(o.Netdevs) == 0 && o.GIDIndex == 0 {
		return nil, nil
	}
	if o.GIDIndex < 0 {
		return nil, &usageError{fmt.Errorf("--rdma-gid-index %d: want 0 or more", o.GIDIndex)}
	}
	if t, _, err := resolver.ParseTarget(target); err != nil || t.Transport != "rdma" {
		return nil, &usageError{fmt.Errorf("--rdma-device, --rdma-netdev and --rdma-gid-index need an rdma:// or rdma+RESOLVER:/// target, not %q", target)}
	}
	return rpc.WithTransport(rdma.New(o)), nil
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
	if ro, err := f.rdmaOption(target); err != nil {
		return nil, err
	} else if ro != nil {
		opts = append(opts, ro)
	}
	if f.fallback != "" {
		opts = append(opts, rpc.WithFallback(f.fallback))
	}
	return rpc.Dial(ctx, target, opts...)
}
