// The Docker backend's containers: their cgroups, removing them whole,
// the warm spares, and what a dead trellis left behind.

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// inspectExec waits briefly for the engine to record the process's end.
func (d *Docker) inspectExec(ctx context.Context, id string) (container.ExecInspect, error) {
	for i := 0; ; i++ {
		ins, err := d.cli.ContainerExecInspect(ctx, id)
		if err != nil || !ins.Running || i == 100 {
			return ins, err
		}
		select {
		case <-ctx.Done():
			return ins, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// cgroup is the container's cgroups when the engine runs on this machine
// (v1 with the cgroupfs driver, or v2), else nil.
func (d *Docker) cgroup(id string) *jobGroup {
	v1 := filepath.Join(cgroupRoot, "memory", "docker", id)
	if _, err := os.Stat(v1); err == nil {
		return &jobGroup{c: &cgroups{version: "v1"}, dirs: map[string]string{"memory": v1,
			"pids": filepath.Join(cgroupRoot, "pids", "docker", id), "cpuacct": filepath.Join(cgroupRoot, "cpuacct", "docker", id)}}
	}
	for _, v2 := range []string{filepath.Join(cgroupRoot, "system.slice", "docker-"+id+".scope"), filepath.Join(cgroupRoot, "docker", id)} {
		if _, err := os.Stat(filepath.Join(v2, "memory.peak")); err == nil {
			return &jobGroup{c: &cgroups{version: "v2"}, dirs: map[string]string{"": v2}}
		}
	}
	return nil
}

// discard kills a container at once, with whatever it runs, and removes
// it, in the background (a minute at most).
func (d *Docker) discard(b *box) {
	if b == nil {
		return
	}
	if b.att.Conn != nil {
		b.att.Close()
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d.remove(ctx, b.id)
	}()
}

// remove removes a container and returns once it is gone (or ctx ends).
func (d *Docker) remove(ctx context.Context, id string) {
	for i := range 3 {
		err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
		switch {
		case err == nil || cerrdefs.IsNotFound(err) || ctx.Err() != nil:
			return
		case cerrdefs.IsConflict(err):
			// its removal is already under way (the engine's auto-remove,
			// once the container's first process ended): it is done
			// when the container is gone, and tried again if it failed
			waited, failed := d.cli.ContainerWait(ctx, id, container.WaitConditionRemoved)
			select {
			case <-waited:
				continue
			case err := <-failed:
				if err == nil || cerrdefs.IsNotFound(err) || ctx.Err() != nil {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(i+1) * 100 * time.Millisecond):
		}
	}
}

// Spares lists the warm containers ready, of every image and set of
// limits (after those being started are).
func (d *Docker) Spares() []string {
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for _, l := range d.spares {
		for _, b := range l {
			ids = append(ids, b.id)
		}
	}
	return ids
}

// Leftovers lists the containers this backend made that still exist,
// but for its warm ones (none, once every execution has ended).
func (d *Docker) Leftovers(ctx context.Context) ([]string, error) {
	d.wg.Wait() // spares being started, containers being removed
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", ownerLabel+"="+d.owner))})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	spare := map[string]bool{}
	for _, l := range d.spares {
		for _, b := range l {
			spare[b.id] = true
		}
	}
	var ids []string
	for _, c := range list {
		if d.made[c.ID] && !spare[c.ID] {
			ids = append(ids, c.ID)
		}
	}
	return ids, nil
}

// Reap removes the sandbox containers that processes of this machine,
// now gone, left behind (on this boot; those of other machines sharing
// the engine are theirs to remove).
func (d *Docker) Reap(ctx context.Context) ([]string, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		return nil, err
	}
	var gone []string
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range list {
		boot, o, ok := strings.Cut(c.Labels[ownerLabel], "/")
		if !ok || boot != bootID() || o == string(self()) || owner(o).alive() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.remove(ctx, c.ID)
			mu.Lock()
			gone = append(gone, c.ID[:12])
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(gone)
	return gone, nil
}
