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
	var metricsURL string
	cmd := &cobra.Command{
		Use:   "stats [device]",
		Short: "Print RDMA device counters (all devices, or the one named), and a process's transport counters",
		Long: `stats prints the counters of every port of an RDMA device (or of every
device): the provider's hw_counters and the standard port counters, from
/sys/class/infiniband/<device>/ports/<port>/. Error counters that must stay at
zero under rdmarpc (RNR and retry-exceeded errors) are flagged when they are not.

With --metrics URL it also prints the transport counters of a running process
from its Prometheus endpoint (kvserver --metrics-addr: http://ADDR/metrics):
rdma://'s connections opened per device (conns_opened_<device>), messages,
credits and the rest. With --json and --metrics the output is an object:
{"ports": [...], "transport": [{"scheme", "name", "value"}, ...]}.

It fails when the host has no RDMA device, or not the one named (with
--metrics and no device named, a host without devices prints the transport
counters alone).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tc []transportCounter
			if metricsURL != "" {
				var err error
				if tc, err = fetchTransportCounters(cmd.Context(), metricsURL); err != nil {
					return err
				}
			}
			devs, err := src.list()
			if err != nil {
				return err
			}
			if len(devs) == 0 && (metricsURL == "" || len(args) == 1) {
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
			if out == nil {
				out = []portCounters{}
			}
			switch {
			case asJSON && metricsURL != "":
				if tc == nil {
					tc = []transportCounter{}
				}
				return writeJSON(cmd.OutOrStdout(), struct {
					Ports     []portCounters     `json:"ports"`
					Transport []transportCounter `json:"transport"`
				}{out, tc})
			case asJSON:
				return writeJSON(cmd.OutOrStdout(), out)
			}
			if err := printStats(cmd.OutOrStdout(), out); err != nil || metricsURL == "" {
				return err
			}
			return printTransportCounters(cmd.OutOrStdout(), metricsURL, tc)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&metricsURL, "metrics", "", "also print the transport counters of the process serving Prometheus metrics at this URL (http://ADDR/metrics)")
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
