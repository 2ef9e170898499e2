package grpclog

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewZapLogger returns a LoggerV2 that logs through l, named "grpclog":
// INFO at zap's Info, WARNING at Warn, ERROR at Error, FATAL at Fatal
// (which exits). V(l) is true for 0, and for any level while l logs at
// Debug.
//
//	grpclog.SetLoggerV2(grpclog.NewZapLogger(log))
func NewZapLogger(l *zap.Logger) LoggerV2 {
	return zapLogger{l.Named("grpclog").WithOptions(zap.AddCallerSkip(2))}
}

type zapLogger struct{ l *zap.Logger }

func (z zapLogger) Info(args ...any)                    { z.l.Info(fmt.Sprint(args...)) }
func (z zapLogger) Infoln(args ...any)                  { z.l.Info(sprintln(args...)) }
func (z zapLogger) Infof(format string, args ...any)    { z.l.Info(fmt.Sprintf(format, args...)) }
func (z zapLogger) Warning(args ...any)                 { z.l.Warn(fmt.Sprint(args...)) }
func (z zapLogger) Warningln(args ...any)               { z.l.Warn(sprintln(args...)) }
func (z zapLogger) Warningf(format string, args ...any) { z.l.Warn(fmt.Sprintf(format, args...)) }
func (z zapLogger) Error(args ...any)                   { z.l.Error(fmt.Sprint(args...)) }
func (z zapLogger) Errorln(args ...any)                 { z.l.Error(sprintln(args...)) }
func (z zapLogger) Errorf(format string, args ...any)   { z.l.Error(fmt.Sprintf(format, args...)) }
func (z zapLogger) Fatal(args ...any)                   { z.l.Fatal(fmt.Sprint(args...)) }
func (z zapLogger) Fatalln(args ...any)                 { z.l.Fatal(sprintln(args...)) }
func (z zapLogger) Fatalf(format string, args ...any)   { z.l.Fatal(fmt.Sprintf(format, args...)) }
func (z zapLogger) V(l int) bool                        { return l <= 0 || z.l.Core().Enabled(zapcore.DebugLevel) }
