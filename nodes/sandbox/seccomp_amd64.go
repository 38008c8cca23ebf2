package sandbox

import "golang.org/x/sys/unix"

const (
	auditArch = 0xc000003e // AUDIT_ARCH_X86_64
	x32Bit    = 0x40000000 // x32 system calls are numbered from here
)

var deniedArch = []uintptr{unix.SYS_INOTIFY_INIT, unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_USELIB, unix.SYS_USTAT,
	unix.SYS_SYSFS, unix.SYS__SYSCTL, unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE,
	unix.SYS_MODIFY_LDT}

var fcntlCalls = []uintptr{unix.SYS_FCNTL}
