package seatbelt

import (
	"os"
	"syscall"
)

func changeTime(st os.FileInfo) (int64, uint64) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ctim.Nano(), uint64(s.Nlink)
	}
	return 0, 0
}
