package images

import "golang.org/x/sys/unix"

func mkfifo(p string) error { return unix.Mkfifo(p, 0o600) }

func unixMunmap(b []byte) { _ = unix.Munmap(b) }
