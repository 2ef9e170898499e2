package main

import (
	"errors"
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

// TestRDMADialFlags: call, bench and list take --rdma-device, --rdma-netdev
// and --rdma-gid-index for an rdma:// target, and refuse them for another.
func TestRDMADialFlags(t *testing.T) {
	var f dialFlags
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	f.add(cmd)
	cmd.SetArgs([]string{"--rdma-device", "mlx5_0:1", "--rdma-netdev", "net1", "--rdma-gid-index", "3"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.rdmaDevices, []string{"mlx5_0:1"}) || !slices.Equal(f.rdmaNetdevs, []string{"net1"}) || f.rdmaGIDIndex != 3 {
		t.Fatalf("flags parsed as %+v", f)
	}
	for _, target := range []string{"rdma://10.0.0.1:7070", "rdma+dns:///kvserver.default.svc:7070"} {
		if o, err := f.rdmaOption(target); o == nil || err != nil {
			t.Errorf("%s: option %v, %v; want the RDMA transport", target, o, err)
		}
	}
	var ue *usageError
	for _, target := range []string{"tcp://10.0.0.1:7070", "auto://10.0.0.1:7070"} {
		if _, err := f.rdmaOption(target); !errors.As(err, &ue) {
			t.Errorf("%s with --rdma-netdev: %v, want a usage error", target, err)
		}
	}
	if _, err := (&dialFlags{rdmaGIDIndex: -1}).rdmaOption("rdma://10.0.0.1:7070"); !errors.As(err, &ue) {
		t.Errorf("--rdma-gid-index -1: %v, want a usage error", err)
	}
	if o, err := (&dialFlags{}).rdmaOption("tcp://10.0.0.1:7070"); o != nil || err != nil {
		t.Errorf("no --rdma-* flag: %v, %v; want no option", o, err)
	}
}
