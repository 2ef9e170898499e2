package bench

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/rdmarpc/rdmarpc/transport/rdma"
)

// RDMAFlags are the rdma:// transport's options a benchmark takes from its
// command line, so that a run says which waiting and layout it measured:
// how long a waiter polls for a reply (rdma.Options.PollSpin), where a
// connection's receive buffers and completions come from, and above what
// size a message goes by rendezvous. Zero values are the transport's
// defaults.
type RDMAFlags struct {
	PollSpin    time.Duration
	Receive     string // "", "own" or "shared"
	Completions string // "", "own" or "shared"
	Rendezvous  string // "", "off" or a threshold size ("1MiB")
}

// Register adds the flags to fs: --rdma-poll-spin, --rdma-receive,
// --rdma-completions, --rdma-rendezvous.
func (f *RDMAFlags) Register(fs *flag.FlagSet) {
	fs.DurationVar(&f.PollSpin, "rdma-poll-spin", 0, "rdma:// transport's PollSpin: how long a waiter polls an empty completion queue for a reply before it sleeps (0: the default, 500µs; negative: never spin)")
	fs.StringVar(&f.Receive, "rdma-receive", "", "rdma:// receive layout: own (ReceivePerConnection) or shared (ReceiveShared); empty: the default")
	fs.StringVar(&f.Completions, "rdma-completions", "", "rdma:// completion layout: own (CompletionsPerConnection) or shared (CompletionsShared); empty: the default")
	fs.StringVar(&f.Rendezvous, "rdma-rendezvous", "", "the rdma transport's rendezvous threshold, both ends: off (fragments), or a `size` (messages above it go by RDMA Read); empty: the transport's default")
}

// IsDefault reports whether every option is the transport's default.
func (f RDMAFlags) IsDefault() bool { return f == RDMAFlags{} }

// Options is the rdma.Options the flags ask for.
func (f RDMAFlags) Options() (rdma.Options, error) {
	var o rdma.Options
	o.PollSpin = f.PollSpin
	switch f.Receive {
	case "":
	case "own":
		o.Receive = rdma.ReceivePerConnection
	case "shared":
		o.Receive = rdma.ReceiveShared
	default:
		return o, fmt.Errorf("bad --rdma-receive %q: want own or shared", f.Receive)
	}
	switch f.Completions {
	case "":
	case "own":
		o.Completions = rdma.CompletionsPerConnection
	case "shared":
		o.Completions = rdma.CompletionsShared
	default:
		return o, fmt.Errorf("bad --rdma-completions %q: want own or shared", f.Completions)
	}
	switch f.Rendezvous {
	case "":
	case "off":
		o.RendezvousThreshold = -1
	default:
		n, err := ParseSize(f.Rendezvous)
		if err != nil || n < 1 {
			return o, fmt.Errorf("bad --rdma-rendezvous %q: want off or a size (1MiB)", f.Rendezvous)
		}
		o.RendezvousThreshold = n
	}
	return o, nil
}

// String names the options as the page records them:
// "poll-spin=500µs receive=default completions=shared".
func (f RDMAFlags) String() string {
	spin := "default"
	switch {
	case f.PollSpin < 0:
		spin = "off"
	case f.PollSpin > 0:
		spin = f.PollSpin.String()
	}
	or := func(s string) string {
		if s == "" {
			return "default"
		}
		return s
	}
	s := "poll-spin=" + spin + " receive=" + or(f.Receive) + " completions=" + or(f.Completions)
	if f.Rendezvous != "" {
		s += " rendezvous=" + f.Rendezvous
	}
	return s
}

// Encode is the flags as one word, for a child process's environment;
// DecodeRDMAFlags reads it back.
func (f RDMAFlags) Encode() string {
	return f.PollSpin.String() + "," + f.Receive + "," + f.Completions + "," + f.Rendezvous
}

// DecodeRDMAFlags reads what Encode wrote ("" is the defaults).
func DecodeRDMAFlags(s string) (RDMAFlags, error) {
	var f RDMAFlags
	if s == "" {
		return f, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return f, fmt.Errorf("bad rdma options %q", s)
	}
	d, err := time.ParseDuration(parts[0])
	if err != nil {
		return f, fmt.Errorf("bad rdma options %q: %w", s, err)
	}
	f = RDMAFlags{PollSpin: d, Receive: parts[1], Completions: parts[2], Rendezvous: parts[3]}
	if _, err := f.Options(); err != nil {
		return RDMAFlags{}, err
	}
	return f, nil
}
