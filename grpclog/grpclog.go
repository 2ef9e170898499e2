package grpclog

import (
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// LoggerV2 is what the package's functions log through, as gRPC-go's.
// Fatal, Fatalf and Fatalln must end the program (os.Exit(1)) after
// logging.
type LoggerV2 interface {
	Info(args ...any)
	Infoln(args ...any)
	Infof(format string, args ...any)
	Warning(args ...any)
	Warningln(args ...any)
	Warningf(format string, args ...any)
	Error(args ...any)
	Errorln(args ...any)
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalln(args ...any)
	Fatalf(format string, args ...any)
	// V reports whether the verbosity level is at least l.
	V(l int) bool
}

var current atomic.Pointer[LoggerV2]

func init() {
	var l LoggerV2 = fromEnv()
	current.Store(&l)
}

// SetLoggerV2 makes l the logger of the package's functions. Not for use
// while they may be called: call it from init or the start of main, as
// gRPC-go says of its own.
func SetLoggerV2(l LoggerV2) { current.Store(&l) }

func logger() LoggerV2 { return *current.Load() }

// Info logs at INFO, as fmt.Print.
func Info(args ...any) { logger().Info(args...) }

// Infof logs at INFO, as fmt.Printf.
func Infof(format string, args ...any) { logger().Infof(format, args...) }

// Infoln logs at INFO, as fmt.Println.
func Infoln(args ...any) { logger().Infoln(args...) }

// Warning logs at WARNING, as fmt.Print.
func Warning(args ...any) { logger().Warning(args...) }

// Warningf logs at WARNING, as fmt.Printf.
func Warningf(format string, args ...any) { logger().Warningf(format, args...) }

// Warningln logs at WARNING, as fmt.Println.
func Warningln(args ...any) { logger().Warningln(args...) }

// Error logs at ERROR, as fmt.Print.
func Error(args ...any) { logger().Error(args...) }

// Errorf logs at ERROR, as fmt.Printf.
func Errorf(format string, args ...any) { logger().Errorf(format, args...) }

// Errorln logs at ERROR, as fmt.Println.
func Errorln(args ...any) { logger().Errorln(args...) }

// Fatal logs at FATAL, as fmt.Print, and ends the program.
func Fatal(args ...any) { logger().Fatal(args...); os.Exit(1) }

// Fatalf logs at FATAL, as fmt.Printf, and ends the program.
func Fatalf(format string, args ...any) { logger().Fatalf(format, args...); os.Exit(1) }

// Fatalln logs at FATAL, as fmt.Println, and ends the program.
func Fatalln(args ...any) { logger().Fatalln(args...); os.Exit(1) }

// V reports whether the logger's verbosity level is at least l.
func V(l int) bool { return logger().V(l) }

// fromEnv is gRPC-go's default logger: ERROR to stderr, or the severity
// and verbosity its environment variables name.
func fromEnv() LoggerV2 {
	info, warning, errs := io.Discard, io.Discard, io.Writer(os.Stderr)
	switch strings.ToLower(os.Getenv("GRPC_GO_LOG_SEVERITY_LEVEL")) {
	case "info":
		info = os.Stderr
	case "warning":
		warning = os.Stderr
	}
	v, _ := strconv.Atoi(os.Getenv("GRPC_GO_LOG_VERBOSITY_LEVEL"))
	return NewLoggerV2WithVerbosity(info, warning, errs, v)
}

// NewLoggerV2 returns a logger that writes INFO lines to infoW, WARNING
// lines to warningW and infoW, ERROR and FATAL lines to all three, as
// gRPC-go's, each line the date and time, its severity and the message.
func NewLoggerV2(infoW, warningW, errorW io.Writer) LoggerV2 {
	return NewLoggerV2WithVerbosity(infoW, warningW, errorW, 0)
}

// NewLoggerV2WithVerbosity is NewLoggerV2 whose V(l) is true up to
// verbosity v.
func NewLoggerV2WithVerbosity(infoW, warningW, errorW io.Writer, v int) LoggerV2 {
	warningW = io.MultiWriter(infoW, warningW)
	errorW = io.MultiWriter(warningW, errorW)
	return &writers{
		info:    log.New(infoW, "INFO: ", log.LstdFlags|log.Lmsgprefix),
		warning: log.New(warningW, "WARNING: ", log.LstdFlags|log.Lmsgprefix),
		err:     log.New(errorW, "ERROR: ", log.LstdFlags|log.Lmsgprefix),
		fatal:   log.New(errorW, "FATAL: ", log.LstdFlags|log.Lmsgprefix),
		v:       v,
	}
}

type writers struct {
	info, warning, err, fatal *log.Logger
	v                         int
}

func (w *writers) Info(args ...any)                    { w.info.Print(args...) }
func (w *writers) Infoln(args ...any)                  { w.info.Println(args...) }
func (w *writers) Infof(format string, args ...any)    { w.info.Printf(format, args...) }
func (w *writers) Warning(args ...any)                 { w.warning.Print(args...) }
func (w *writers) Warningln(args ...any)               { w.warning.Println(args...) }
func (w *writers) Warningf(format string, args ...any) { w.warning.Printf(format, args...) }
func (w *writers) Error(args ...any)                   { w.err.Print(args...) }
func (w *writers) Errorln(args ...any)                 { w.err.Println(args...) }
func (w *writers) Errorf(format string, args ...any)   { w.err.Printf(format, args...) }
func (w *writers) Fatal(args ...any)                   { w.fatal.Print(args...); os.Exit(1) }
func (w *writers) Fatalln(args ...any)                 { w.fatal.Println(args...); os.Exit(1) }
func (w *writers) Fatalf(format string, args ...any)   { w.fatal.Printf(format, args...); os.Exit(1) }
func (w *writers) V(l int) bool                        { return l <= w.v }

// sprintln is fmt.Sprintln without its newline: a zap entry is one line.
func sprintln(args ...any) string { return strings.TrimSuffix(fmt.Sprintln(args...), "\n") }
