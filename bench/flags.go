package bench

import (
	"os"
	"strconv"
	"strings"
)

// SplitList splits a comma-separated flag value (sizes, concurrencies,
// files), trimming spaces and dropping empty items: the commands' lists.
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// EnvInt is the integer in the environment variable name, or def when it
// is unset or not a number: the test bed's RDMARPC_TEST_* defaults.
func EnvInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}
