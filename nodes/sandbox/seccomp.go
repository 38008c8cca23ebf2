package sandbox

import (
	"encoding/binary"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter of the local backend, a classic BPF program that
// bubblewrap installs (--seccomp) just before it starts the sandboxed
// process. It mirrors what Docker's default profile denies that matters
// here, and the denials the Docker backend adds to that profile (see
// dockerProfile): another architecture's system calls, tracing and
// reading other processes (ptrace, process_vm_*, pidfd_getfd, kcmp), the
// kernel's keyrings, io_uring, userfaultfd, perf and bpf, inotify and
// fanotify (a channel between executions through the shared tree), file
// locks (the same), AF_VSOCK sockets (the hypervisor), new namespaces,
// mounts, file handles, modules, time, swap and reboot.

const (
	retAllow       = 0x7fff0000
	retErrno       = 0x00050000
	retKillProcess = 0x80000000
	afVsock        = 40
	eafnosupport   = 97
	// clone flags that make namespaces
	cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME
)

// deniedCommon are denied on every architecture (numbers of this build's).
var deniedCommon = []uintptr{
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV, unix.SYS_PIDFD_GETFD, unix.SYS_KCMP,
	unix.SYS_PROCESS_MADVISE,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_USERFAULTFD, unix.SYS_PERF_EVENT_OPEN, unix.SYS_BPF,
	unix.SYS_INOTIFY_INIT1, unix.SYS_INOTIFY_ADD_WATCH, unix.SYS_FANOTIFY_INIT, unix.SYS_FANOTIFY_MARK,
	unix.SYS_FLOCK,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_UNSHARE, unix.SYS_SETNS, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_SYSLOG,
	unix.SYS_VHANGUP, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_NFSSERVCTL,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_MIGRATE_PAGES, unix.SYS_MOVE_PAGES, unix.SYS_MBIND, unix.SYS_SET_MEMPOLICY,
}

// lockCommands are fcntl's lock commands (F_GETLK, F_SETLK, F_SETLKW
// and their open file description forms).
var lockCommands = []uint32{unix.F_GETLK, unix.F_SETLK, unix.F_SETLKW, unix.F_OFD_GETLK, unix.F_OFD_SETLK, unix.F_OFD_SETLKW}

// seccompProgram is the filter as bubblewrap reads it (struct sock_filter
// in this machine's byte order), or nil on an architecture it does not
// know.
func seccompProgram() []byte {
	if auditArch == 0 {
		return nil
	}
	errno := func(e uint32) bpf.Instruction { return bpf.RetConstant{Val: retErrno | e} }
	nr := bpf.LoadAbsolute{Off: 0, Size: 4}
	arg := func(i uint32) bpf.Instruction { return bpf.LoadAbsolute{Off: 16 + 8*i, Size: 4} } // its low 32 bits
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		bpf.RetConstant{Val: retKillProcess},
		nr,
	}
	if x32Bit != 0 {
		p = append(p, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1}, errno(uint32(unix.ENOSYS)))
	}
	for _, n := range append(deniedCommon, deniedArch...) {
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(n), SkipFalse: 1}, errno(uint32(unix.EPERM)))
	}
	// clone3 hides its flags in memory: ENOSYS makes the C library use
	// clone, whose flags are checked
	p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(unix.SYS_CLONE3), SkipFalse: 1}, errno(uint32(unix.ENOSYS)))
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(unix.SYS_CLONE), SkipFalse: 3},
		arg(0),
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: cloneNamespaces, SkipFalse: 1},
		errno(uint32(unix.EPERM)),
		nr,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(unix.SYS_SOCKET), SkipFalse: 3},
		arg(0),
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: afVsock, SkipFalse: 1},
		errno(eafnosupport),
		nr,
	)
	for _, call := range fcntlCalls {
		skip := uint8(2 + 2*len(lockCommands))
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(call), SkipFalse: skip}, arg(1))
		for _, c := range lockCommands {
			p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: c, SkipFalse: 1}, errno(uint32(unix.EPERM)))
		}
		p = append(p, nr)
	}
	p = append(p, bpf.RetConstant{Val: retAllow})
	raw, err := bpf.Assemble(p)
	if err != nil {
		panic("sandbox: the seccomp filter does not assemble: " + err.Error())
	}
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out
}
