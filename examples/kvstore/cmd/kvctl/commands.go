package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
)

func (c *cli) getCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value of KEY (exit status 1 when it does not exist)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, kv kvpb.KVClient) error {
				resp, err := kv.Get(ctx, &kvpb.GetRequest{Key: []byte(args[0])})
				if err != nil {
					return err
				}
				if c.json {
					out := map[string]any{"found": resp.GetFound()}
					putBytes(out, "key", []byte(args[0]))
					if resp.GetFound() {
						putBytes(out, "value", resp.GetValue())
					}
					c.printJSON(out)
					if !resp.GetFound() {
						c.status = 1
					}
					return nil
				}
				if !resp.GetFound() {
					return notFound(args[0])
				}
				c.stdout.Write(append(resp.GetValue(), '\n'))
				return nil
			})
		},
	}
}

func (c *cli) putCmd() *cobra.Command {
	var valueFile string
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE]",
		Short: "Set KEY to VALUE (or to the contents of --value-file)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var value []byte
			switch {
			case len(args) == 2 && valueFile != "":
				return usageError("put: give VALUE or --value-file, not both")
			case len(args) == 2:
				value = []byte(args[1])
			case valueFile == "":
				return usageError("put: give VALUE or --value-file")
			default:
				var err error
				if value, err = c.readFile(valueFile); err != nil {
					return usageError("put: %v", err)
				}
			}
			return c.call(cmd, func(ctx context.Context, kv kvpb.KVClient) error {
				if _, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte(args[0]), Value: value}); err != nil {
					return err
				}
				c.ok()
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&valueFile, "value-file", "", "read the value from this file (- for stdin)")
	return cmd
}

func (c *cli) readFile(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(c.stdin)
	}
	return os.ReadFile(name)
}

// ok reports a write that succeeded.
func (c *cli) ok() {
	if c.json {
		c.printJSON(map[string]any{"ok": true})
	} else {
		fmt.Fprintln(c.stdout, "OK")
	}
}

func (c *cli) delCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "del KEY...",
		Aliases: []string{"delete"},
		Short:   "Delete keys (several at once atomically); missing keys are fine",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, kv kvpb.KVClient) error {
				var err error
				if len(args) == 1 {
					_, err = kv.Delete(ctx, &kvpb.DeleteRequest{Key: []byte(args[0])})
				} else {
					req := &kvpb.BatchRequest{}
					for _, k := range args {
						req.Mutations = append(req.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Delete{Delete: []byte(k)}})
					}
					_, err = kv.Batch(ctx, req)
				}
				if err != nil {
					return err
				}
				c.ok()
				return nil
			})
		},
	}
}

func (c *cli) scanCmd() *cobra.Command {
	var (
		prefix, start, end, token string
		limit, pageSize           uint32
		keysOnly                  bool
	)
	cmd := &cobra.Command{
		Use:   "scan",
		Short: "List keys and values in order, by prefix or range",
		Long: `List keys and values in ascending key order: all of them, those with --prefix,
or those from --start (inclusive) to --end (exclusive). kvctl fetches pages
of --page-size until it has printed --limit pairs (0: all of them); when it
stops early it prints the token that continues the scan (--page-token).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if prefix != "" && (start != "" || end != "") {
				return usageError("scan: give --prefix or --start/--end, not both")
			}
			req := &kvpb.ScanRequest{Prefix: []byte(prefix), Start: []byte(start), End: []byte(end), KeysOnly: keysOnly}
			if token != "" {
				t, err := base64.RawURLEncoding.DecodeString(token)
				if err != nil {
					return usageError("scan: --page-token is not a token kvctl printed: %v", err)
				}
				req.PageToken = t
			}
			return c.call(cmd, func(ctx context.Context, kv kvpb.KVClient) error {
				var pairs []*kvpb.KeyValue
				for {
					req.Limit = pageSize
					if limit > 0 {
						req.Limit = min(pageSize, limit-uint32(len(pairs)))
					}
					resp, err := kv.Scan(ctx, req)
					if err != nil {
						return err
					}
					pairs = append(pairs, resp.GetPairs()...)
					req.PageToken = resp.GetNextPageToken()
					if len(req.PageToken) == 0 || limit > 0 && uint32(len(pairs)) >= limit {
						break
					}
				}
				c.printScan(pairs, req.PageToken, keysOnly)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&prefix, "prefix", "", "keys starting with this")
	f.StringVar(&start, "start", "", "first key (inclusive)")
	f.StringVar(&end, "end", "", "end key (exclusive)")
	f.Uint32Var(&limit, "limit", 0, "print at most this many pairs (0: all)")
	f.Uint32Var(&pageSize, "page-size", 1000, "pairs per call")
	f.StringVar(&token, "page-token", "", "continue a scan that stopped at --limit")
	f.BoolVar(&keysOnly, "keys-only", false, "print keys only")
	return cmd
}

func (c *cli) printScan(pairs []*kvpb.KeyValue, next []byte, keysOnly bool) {
	tok := ""
	if len(next) > 0 {
		tok = base64.RawURLEncoding.EncodeToString(next)
	}
	if c.json {
		list := make([]map[string]any, len(pairs))
		for i, p := range pairs {
			m := map[string]any{}
			putBytes(m, "key", p.GetKey())
			if !keysOnly {
				putBytes(m, "value", p.GetValue())
			}
			list[i] = m
		}
		out := map[string]any{"pairs": list}
		if tok != "" {
			out["next_page_token"] = tok
		}
		c.printJSON(out)
		return
	}
	for _, p := range pairs {
		if keysOnly {
			fmt.Fprintln(c.stdout, show(p.GetKey()))
		} else {
			fmt.Fprintf(c.stdout, "%s\t%s\n", show(p.GetKey()), show(p.GetValue()))
		}
	}
	if tok != "" {
		fmt.Fprintf(c.stderr, "(more: continue with --page-token %s)\n", tok)
	}
}

func (c *cli) batchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "batch (put KEY VALUE | del KEY)...",
		Short: "Apply puts and deletes atomically, in order",
		Example: `  kvctl batch put user/1 alice put user/2 bob del user/0
  kvctl batch del tmp/a del tmp/b`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &kvpb.BatchRequest{}
			for i := 0; i < len(args); {
				switch op := args[i]; {
				case op == "put" && i+2 < len(args):
					req.Mutations = append(req.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: []byte(args[i+1]), Value: []byte(args[i+2])}}})
					i += 3
				case (op == "del" || op == "delete") && i+1 < len(args):
					req.Mutations = append(req.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Delete{Delete: []byte(args[i+1])}})
					i += 2
				case op == "put" || op == "del" || op == "delete":
					return usageError("batch: %s at argument %d lacks its key or value", op, i+1)
				default:
					return usageError("batch: argument %d is %q, want put or del", i+1, op)
				}
			}
			return c.call(cmd, func(ctx context.Context, kv kvpb.KVClient) error {
				if _, err := kv.Batch(ctx, req); err != nil {
					return err
				}
				c.ok()
				return nil
			})
		},
	}
}

func (c *cli) casCmd() *cobra.Command {
	var (
		expect       string
		expectAbsent bool
	)
	cmd := &cobra.Command{
		Use:   "cas KEY NEW (--expect OLD | --expect-absent)",
		Short: "Set KEY to NEW if it holds OLD (or does not exist); else fail with Aborted",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			hasExpect := cmd.Flags().Changed("expect")
			if hasExpect == expectAbsent {
				return usageError("cas: give exactly one of --expect OLD and --expect-absent")
			}
			req := &kvpb.CompareAndSwapRequest{Key: []byte(args[0]), Value: []byte(args[1])}
			if hasExpect {
				req.Expected = []byte(expect) // non-nil even when empty: set
			}
			return c.call(cmd, func(ctx context.Context, kv kvpb.KVClient) error {
				if _, err := kv.CompareAndSwap(ctx, req); err != nil {
					return err
				}
				c.ok()
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&expect, "expect", "", "the value KEY must hold")
	cmd.Flags().BoolVar(&expectAbsent, "expect-absent", false, "KEY must not exist")
	return cmd
}
