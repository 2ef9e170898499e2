package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
)

// healthCmd asks the server's health service (grpc.health.v1) whether a
// service is SERVING: exit status 0 only when it is, so that it serves as a
// Kubernetes exec probe or a script's wait loop.
func (c *cli) healthCmd() *cobra.Command {
	var service string
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Print the server's health; exit status 0 only when SERVING (a readiness probe)",
		Long: `health calls grpc.health.v1.Health/Check for --service (default: the KV
service; "" asks about the server as a whole) and prints its status.
Exit status: 0 when SERVING; 1 when NOT_SERVING, unknown, or unreachable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), c.timeout)
			defer cancel()
			cc, _, err := c.dial(ctx)
			if err != nil {
				return err
			}
			defer cc.Close()
			resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			if err != nil {
				return err
			}
			st := resp.GetStatus()
			if c.json {
				c.printJSON(map[string]any{"service": service, "status": st.String()})
			} else {
				fmt.Fprintln(c.stdout, st)
			}
			if st != healthpb.HealthCheckResponse_SERVING {
				c.status = 1
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&service, "service", kvpb.KV_ServiceDesc.ServiceName, `service to ask about ("" for the whole server)`)
	return cmd
}
