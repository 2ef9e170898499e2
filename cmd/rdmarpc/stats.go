package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// mustStayZero are the device counters that count failures rdmarpc's credit
// scheme rules out (RNR) or that mean the link lost packets for good; a
// non-zero value is flagged.
var mustStayZero = map[string]bool{
	"rcvd_rnr_err":           true,
	"send_rnr_err":           true,
	"retry_exceeded_err":     true,
	"retry_rnr_exceeded_err": true,
	"rnr_nak_retry_err":      true, // mlx5's name
}

// portCounters is one port's counters, as `stats --json` prints them.
type portCounters struct {
	Device   string            `json:"device"`
	Port     uint8             `json:"port"`
	Counters map[string]uint64 `json:"counters"`
}

func newStatsCmd(src deviceSource) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [device]",
		Short: "Print RDMA device counters (all devices, or the one named)",
		Long: `stats prints the counters of every port of an RDMA device (or of every
device): the provider's hw_counters and the standard port counters, from
/sys/class/infiniband/<device>/ports/<port>/. Error counters that must stay at
zero under rdmarpc (RNR and retry-exceeded errors) are flagged when they are not.

It fails when the host has no RDMA device, or not the one named.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			devs, err := src.list()
			if err != nil {
				return err
			}
			if len(devs) == 0 {
				return errNoDevices
			}
			var names []string
			for _, d := range devs {
				names = append(names, d.Name)
			}
			var out []portCounters
			for _, d := range devs {
				if len(args) == 1 && d.Name != args[0] {
					continue
				}
				for _, p := range d.Ports {
					c, err := src.counters(d.Name, p.Num)
					if err != nil {
						return err
					}
					out = append(out, portCounters{Device: d.Name, Port: p.Num, Counters: c})
				}
			}
			if len(args) == 1 && !slices.Contains(names, args[0]) {
				return fmt.Errorf("no RDMA device %q (devices: %v)", args[0], names)
			}
			if asJSON {
				if out == nil {
					out = []portCounters{}
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printStats(cmd.OutOrStdout(), out)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func init() { rootCmd.AddCommand(newStatsCmd(hostDevices)) }

func printStats(w io.Writer, ports []portCounters) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, pc := range ports {
		fmt.Fprintf(tw, "%s port %d\n", pc.Device, pc.Port)
		names := make([]string, 0, len(pc.Counters))
		for n := range pc.Counters {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			v := pc.Counters[n]
			flag := ""
			if v != 0 && mustStayZero[n] {
				flag = "\t<- should be 0"
			}
			fmt.Fprintf(tw, "  %s\t%d%s\n", n, v, flag)
		}
	}
	return tw.Flush()
}
