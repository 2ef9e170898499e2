package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvwatch"
	"github.com/rdmarpc/rdmarpc/status"
)

func (c *cli) watchCmd() *cobra.Command {
	var from int64
	cmd := &cobra.Command{
		Use:   "watch [PREFIX]",
		Short: "Print each change to the keys with PREFIX (all keys without one) until interrupted",
		Long: `Print each change to the keys with PREFIX, one line per event:

  REVISION	PUT	KEY	VALUE
  REVISION	DELETE	KEY

from --from REV on (the changes the server still holds first), else from
now. When the connection breaks or the server restarts, watch reconnects
and resumes after the last revision it printed: no change is missed or
printed twice. It ends on ^C (exit status 0), or when the server cannot
resume (OutOfRange: the revision has been compacted; read again and watch
from the read's revision).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from < 0 {
				return usageError("watch: --from %d is negative", from)
			}
			var prefix []byte
			if len(args) == 1 {
				prefix = []byte(args[0])
			}
			dial := func(ctx context.Context) (kvpb.KVClient, func() error, error) {
				ctx, cancel := context.WithTimeout(ctx, c.timeout)
				defer cancel()
				cc, kv, err := c.dial(ctx)
				if err != nil {
					return nil, nil, err
				}
				return kv, cc.Close, nil
			}
			o := kvwatch.Options{Prefix: prefix, From: from, OnRetry: func(err error, from int64) {
				st := status.Convert(err)
				fmt.Fprintf(c.stderr, "kvctl: watch: %s: %s: reconnecting, from revision %d\n", st.Code(), st.Message(), from)
			}}
			err := kvwatch.Follow(cmd.Context(), dial, o, c.printEvents)
			if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				return nil // interrupted: the normal end
			}
			return err
		},
	}
	cmd.Flags().Int64Var(&from, "from", 0, "first revision to print (0: from now)")
	return cmd
}

// printEvents prints one response's events, one line (or one JSON object
// per line with --json) each.
func (c *cli) printEvents(r *kvpb.WatchResponse) error {
	for _, e := range r.GetEvents() {
		if c.json {
			out := map[string]any{"revision": r.GetRevision(), "type": e.GetType().String()}
			putBytes(out, "key", e.GetKey())
			if e.GetType() == kvpb.Event_PUT {
				putBytes(out, "value", e.GetValue())
			}
			b, err := json.Marshal(out)
			if err != nil {
				return err
			}
			if _, err := c.stdout.Write(append(b, '\n')); err != nil {
				return err
			}
			continue
		}
		f := []string{fmt.Sprint(r.GetRevision()), e.GetType().String(), show(e.GetKey())}
		if e.GetType() == kvpb.Event_PUT {
			f = append(f, show(e.GetValue()))
		}
		if _, err := fmt.Fprintln(c.stdout, strings.Join(f, "\t")); err != nil {
			return err
		}
	}
	return nil
}
