package static

import (
	"strings"
	"testing"
)

// FuzzParse: any list parses or fails without a panic; what parses has the
// family asked for and a port, and as many addresses as entries.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"10.0.0.1:1,10.0.0.2", "[::1]:1,::2", "[fe80::1%eth0]:7", ",", "1.2.3.4:99999"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, list string, v6 bool) {
		addrs, err := Parse(list, v6)
		if err != nil {
			return
		}
		if len(addrs) != strings.Count(list, ",")+1 {
			t.Fatalf("%q: %d addresses", list, len(addrs))
		}
		for _, a := range addrs {
			if a.Addr().Is4() == v6 || a.Port() == 0 {
				t.Fatalf("%q (v6 %v): parsed %v", list, v6, a)
			}
		}
	})
}
