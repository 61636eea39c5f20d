package comm

import (
	"log/slog"
	"net"
	"runtime"
)

func memStats() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

type unixAddr = net.UnixAddr

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
