// Package gnetlog sends gnet's own log lines to a slog logger, its chatty
// INFO lines (a loop starting, a connection registered) at debug level:
// the broker and the gateway run gnet with it.
package gnetlog

import (
	"fmt"
	"log/slog"

	"github.com/panjf2000/gnet/v2/pkg/logging"
)

// New is a gnet logger writing to log.
func New(log *slog.Logger) logging.Logger { return logger{log} }

type logger struct{ log *slog.Logger }

func (g logger) Debugf(format string, args ...any) {
	g.log.Debug("gnet: " + fmt.Sprintf(format, args...))
}
func (g logger) Infof(format string, args ...any) {
	g.log.Debug("gnet: " + fmt.Sprintf(format, args...))
}
func (g logger) Warnf(format string, args ...any) {
	g.log.Warn("gnet: " + fmt.Sprintf(format, args...))
}
func (g logger) Errorf(format string, args ...any) {
	g.log.Error("gnet: " + fmt.Sprintf(format, args...))
}
func (g logger) Fatalf(format string, args ...any) {
	g.log.Error("gnet (fatal): " + fmt.Sprintf(format, args...))
}
