package sandbox

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The local backend's filter, run on seccomp's input for system calls:
// what it denies, with which error, and what it lets through.
func TestSeccompFilter(t *testing.T) {
	prog := seccompProgram()
	if prog == nil {
		t.Skip("no filter on this architecture")
	}
	var ins []bpf.Instruction
	for i := 0; i+8 <= len(prog); i += 8 {
		ins = append(ins, bpf.RawInstruction{Op: binary.NativeEndian.Uint16(prog[i:]), Jt: prog[i+2], Jf: prog[i+3],
			K: binary.NativeEndian.Uint32(prog[i+4:])}.Disassemble())
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	// the filter loads 32-bit words (the number, the architecture, the low
	// half of an argument) in this machine's order; bpf's VM loads them
	// in network order: each word is laid out so that the VM reads what
	// the kernel would
	call := func(arch uint32, nr uintptr, args ...uint64) uint32 {
		in := make([]byte, 64)
		binary.BigEndian.PutUint32(in[0:], uint32(nr))
		binary.BigEndian.PutUint32(in[4:], arch)
		for i, a := range args {
			binary.BigEndian.PutUint32(in[16+8*i:], uint32(a))
		}
		got, err := vm.Run(in)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(got)
	}
	errno := func(e unix.Errno) uint32 { return retErrno | uint32(e) }
	for _, c := range []struct {
		name string
		nr   uintptr
		args []uint64
		want uint32
	}{
		{"read", unix.SYS_READ, nil, retAllow},
		{"socket AF_INET", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM}, retAllow},
		{"socket AF_VSOCK", unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, errno(unix.EAFNOSUPPORT)},
		{"fcntl F_GETFL", unix.SYS_FCNTL, []uint64{3, unix.F_GETFL}, retAllow},
		{"fcntl F_SETLK", unix.SYS_FCNTL, []uint64{3, unix.F_SETLK}, errno(unix.EPERM)},
		{"fcntl F_OFD_GETLK", unix.SYS_FCNTL, []uint64{3, unix.F_OFD_GETLK}, errno(unix.EPERM)},
		{"clone of a thread", unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, retAllow},
		{"clone into a new user namespace", unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER}, errno(unix.EPERM)},
		{"clone3", unix.SYS_CLONE3, nil, errno(unix.ENOSYS)},
		{"ptrace", unix.SYS_PTRACE, nil, errno(unix.EPERM)},
		{"pidfd_getfd", unix.SYS_PIDFD_GETFD, nil, errno(unix.EPERM)},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, nil, errno(unix.EPERM)},
		{"inotify_init1", unix.SYS_INOTIFY_INIT1, nil, errno(unix.EPERM)},
		{"keyctl", unix.SYS_KEYCTL, nil, errno(unix.EPERM)},
		{"flock", unix.SYS_FLOCK, nil, errno(unix.EPERM)},
		{"unshare", unix.SYS_UNSHARE, nil, errno(unix.EPERM)},
	} {
		if got := call(auditArch, c.nr, c.args...); got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
	}
	if got := call(0x40000003, unix.SYS_READ); got != retKillProcess {
		t.Errorf("another architecture's call: %#x, want the process killed", got)
	}
	if x32Bit != 0 {
		if got := call(auditArch, x32Bit|unix.SYS_READ); got != errno(unix.ENOSYS) {
			t.Errorf("an x32 call: %#x", got)
		}
	}
}
