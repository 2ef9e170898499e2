#!/bin/sh
# idleping: the race binary (race.bin) with the tests the lend change touches added to
# guest.sh's first list (a later -test.run wins).
case "$*" in
*rdma.completions=shared*) exec /out/race.bin "$@" ;;
*) exec /out/race.bin "$@" -test.run='^(TestSendBackground|TestNoLendToIdlePeer|TestConformance|TestStress|TestRPC.*|TestScale.*|TestShared.*|TestPeerDiesMidCall|TestConnectCloseLeaks)$' ;;
esac
