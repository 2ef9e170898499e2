// Command benchpage writes a page of current figures, bench/results/<area>.md,
// from the files of one run in bench/results/<area>/: a meta.txt that says
// when, at which commit, on which machine, under what load and by which
// command the run was made, and the area's output files. It measures
// nothing; bench/pages.sh runs the benchmark and then benchpage, and the
// make targets run bench/pages.sh, so a committed page is what its target
// wrote from the committed files (TestCommittedPages checks it).
//
//	benchpage -area tcp -dir bench/results/tcp -out bench/results/tcp.md
//
// The areas and the files each reads:
//
//	tcp    peers.csv (rpcbench --compare raw,drpc,grpc); split.csv when
//	       client and server ran in separate processes
//	rdma   ladder.txt (bench/softroce.sh's ladder); rdma-stream.csv if any
//	kv     round<N>-<scheme>.csv (rpcbench --target … --kv …, per round)
//	scale  scale.log (transport/rdma's TestScaleTable, as go test -v logs it)
//
// meta.txt holds "key: value" lines: date, commit, machine, load, command
// (all required), source (where the files came from, when not from a run
// of the target) and any number of note lines, printed under the figures.
package main
