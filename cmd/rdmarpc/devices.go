package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
)

// errNoDevices is what `devices` and `stats` fail with on a host without
// RDMA devices.
var errNoDevices = errors.New("no RDMA devices found (is rdma_rxe loaded? For Soft-RoCE: " +
	"modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <netdev>; " +
	"/sys/class/infiniband is empty or missing)")

// deviceSource is where the device commands get their facts; tests replace it.
//
// Everything comes from sysfs and netlink, in pure Go: the rdmarpc command
// links no cgo, so `go tool rdmarpc gen` builds on machines without
// libibverbs' headers. (The active MTU is rdmadev's estimate from the
// netdev's MTU, which is what the kernel derives it from.)
type deviceSource struct {
	list     func() ([]rdmadev.Device, error)
	counters func(dev string, port uint8) (map[string]uint64, error)
	pinning  func() rdmadev.Pinning
}

var hostDevices = deviceSource{list: rdmadev.List, counters: rdmadev.Counters, pinning: rdmadev.ReadPinning}

func newDevicesCmd(src deviceSource) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List RDMA devices: ports, state, MTU, GIDs with their types and netdevs",
		Long: `devices lists the RDMA devices of this host as the kernel describes them in
/sys/class/infiniband: each port's state, link layer and active MTU, and its
GID table (index, GID, type, netdev). A RoCE v2 GID whose value is an IP
address of the host is what rdmarpc uses to reach that address. Last, the
registered-memory budget rdma:// takes by default in this process, and the
limit it comes from (RLIMIT_MEMLOCK, unless CAP_IPC_LOCK lifts it).

It fails when the host has no RDMA device.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			devs, err := src.list()
			if err != nil {
				return err
			}
			if len(devs) == 0 {
				return errNoDevices
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), devs)
			}
			if err := printDevices(cmd.OutOrStdout(), devs); err != nil {
				return err
			}
			return printBudget(cmd.OutOrStdout(), src.pinning())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func init() { rootCmd.AddCommand(newDevicesCmd(hostDevices)) }

func printDevices(w io.Writer, devs []rdmadev.Device) error {
	for _, d := range devs {
		fmt.Fprintf(w, "%s: type %s, node_guid %s, netdevs %s\n", d.Name, orDash(d.NodeType), orDash(d.NodeGUID), orDash(strings.Join(d.Netdevs, ",")))
		for _, p := range d.Ports {
			mtu := "active_mtu ?"
			if p.ActiveMTU > 0 {
				mtu = fmt.Sprintf("active_mtu %d", p.ActiveMTU)
			}
			if p.NetdevMTU > 0 {
				mtu += fmt.Sprintf(" (netdev mtu %d)", p.NetdevMTU)
			}
			if p.LinkLayer == "InfiniBand" {
				mtu += fmt.Sprintf(", lid 0x%x", p.LID)
			}
			fmt.Fprintf(w, "  port %d: %s (%s), %s, %s\n", p.Num, p.State, orDash(p.PhysState), orDash(p.LinkLayer), mtu)
			if len(p.GIDs) == 0 {
				fmt.Fprintf(w, "    no GIDs\n")
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			for _, g := range p.GIDs {
				fmt.Fprintf(tw, "    gid %d\t%s\t%s\t%s\n", g.Index, gidString(g.GID), g.Type, orDash(g.Netdev))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// printBudget says how much memory rdma:// may register here by default,
// and which limit decided it, with what to raise when that is memlock.
func printBudget(w io.Writer, p rdmadev.Pinning) error {
	b, from := p.Budget()
	if b <= 0 {
		_, err := fmt.Fprintf(w, "registered-memory budget: none (%s)\n", from)
		return err
	}
	_, err := fmt.Fprintf(w, "registered-memory budget: %s, from %s\n", rdmadev.Bytes(b), from)
	if err == nil && !p.CapIPCLock && p.Memlock > 0 && p.Memlock == b {
		_, err = fmt.Fprintf(w, "  to allow more: %s\n", rdmadev.RaiseAdvice)
	}
	return err
}

// gidString writes an IPv4-mapped GID as ::ffff:a.b.c.d, which says both
// what the GID is and which address it stands for.
func gidString(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return "::ffff:" + v4.String()
	}
	return ip.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
