package grpclog_test

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/grpclog"
)

// TestNewLoggerV2: each severity reaches its writer and the writers of the
// severities below it, as gRPC-go's.
func TestNewLoggerV2(t *testing.T) {
	var info, warning, errs bytes.Buffer
	l := grpclog.NewLoggerV2WithVerbosity(&info, &warning, &errs, 2)
	l.Infof("i%d", 1)
	l.Warningln("w", 2)
	l.Error("e", 3)
	for _, tc := range []struct {
		name string
		buf  *bytes.Buffer
		want []string
	}{
		{"info", &info, []string{"INFO: i1", "WARNING: w 2", "ERROR: e3"}},
		{"warning", &warning, []string{"WARNING: w 2", "ERROR: e3"}},
		{"error", &errs, []string{"ERROR: e3"}},
	} {
		lines := strings.Split(strings.TrimSuffix(tc.buf.String(), "\n"), "\n")
		if len(lines) != len(tc.want) {
			t.Errorf("%s writer got %q, want %q", tc.name, lines, tc.want)
			continue
		}
		for i, w := range tc.want {
			if !strings.HasSuffix(lines[i], w) {
				t.Errorf("%s writer line %d = %q, want it to end %q", tc.name, i, lines[i], w)
			}
		}
	}
	if !l.V(2) || l.V(3) {
		t.Errorf("V(2), V(3) = %v, %v; want true, false", l.V(2), l.V(3))
	}
}

// TestZap: the package's functions reach the zap logger SetLoggerV2 gave.
func TestZap(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	grpclog.SetLoggerV2(grpclog.NewZapLogger(zap.New(core)))
	defer grpclog.SetLoggerV2(grpclog.NewLoggerV2(&bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}))
	grpclog.Info("starting ", "server")
	grpclog.Warningf("slow: %d ms", 30)
	grpclog.Errorln("failed", 1)
	want := []struct {
		level zapcore.Level
		msg   string
	}{{zapcore.InfoLevel, "starting server"}, {zapcore.WarnLevel, "slow: 30 ms"}, {zapcore.ErrorLevel, "failed 1"}}
	got := logs.All()
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Level != w.level || got[i].Message != w.msg || got[i].LoggerName != "grpclog" {
			t.Errorf("entry %d = %s %q (%s), want %s %q (grpclog)", i, got[i].Level, got[i].Message, got[i].LoggerName, w.level, w.msg)
		}
	}
	if !grpclog.V(0) || grpclog.V(1) {
		t.Errorf("V(0), V(1) = %v, %v at Info; want true, false", grpclog.V(0), grpclog.V(1))
	}
}
