package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/rdmarpc/rdmarpc/bench/internal/callgrind"
)

// callgrindDirEnv names the directory where the client and the server
// processes under callgrind write their dumps (--callgrind).
const callgrindDirEnv = "RPCBENCH_CALLGRIND_DIR"

// runUnderCallgrind runs rpcbench again, with the same arguments, under
// valgrind's callgrind; its servers then run under it too (startChild).
// The dumps go to keep, which is made if need be, or else to a temporary
// directory removed at the end.
func runUnderCallgrind(args []string, keep string, stdout io.Writer) error {
	if _, err := exec.LookPath("valgrind"); err != nil {
		return fmt.Errorf("--callgrind needs valgrind (apt-get install valgrind): %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir := keep
	if dir == "" {
		if dir, err = os.MkdirTemp("", "rpcbench-callgrind-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	cmd := callgrindCommand(dir, "client", exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, os.Stderr
	return cmd.Run()
}

// callgrindCommand runs exe with args under callgrind, its dumps in dir
// named after role.
func callgrindCommand(dir, role, exe string, args ...string) *exec.Cmd {
	out := filepath.Join(dir, role+".%p")
	cmd := callgrind.Command(out, exe, args...)
	cmd.Env = append(cmd.Env, callgrindDirEnv+"="+dir)
	return cmd
}
