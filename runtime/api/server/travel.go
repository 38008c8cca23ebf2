package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/testfile"
)

// Time travel beyond fork and update: a thread replayed from one of its
// checkpoints, and a thread made into a flow test.

// replayThread forks the thread at a checkpoint and starts the run the
// checkpoint left unfinished on the fork, told the model's replies the
// thread was told unless the caller asks for the model.
func (s *Server) replayThread(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	var in api.Replay
	if err := readJSON(r, &in); err != nil {
		return err
	}
	var recorded bool
	switch in.Replies {
	case "", "recorded":
		recorded = true
	case "model":
	default:
		return &api.Error{Code: api.CodeInvalidInput, Message: `replies is "recorded" (what the model told the thread, told again) or "model" (asked again)`,
			Details: map[string]string{"field": "replies"}}
	}
	fork, snap, err := s.fork(r, c, rec, in.At, in.ID, in.Metadata, recorded)
	if err != nil {
		return err
	}
	made(r, fork.ID)
	thread, err := s.threadInfo(r, fork)
	if err != nil {
		return err
	}
	out := api.Replayed{Thread: thread}
	if len(snap.Next) > 0 {
		l, err := s.threadFlow(r.Context(), fork.Tenant, fork.ID, fork.Flow)
		if err != nil {
			return err
		}
		run, _, err := s.runs.start(r.Context(), c, fork, l, api.StartRun{Resume: true})
		if err != nil {
			return err
		}
		info := runInfo(run, nil)
		out.Run = &info
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// flowTest makes a flow test of the thread (see testfile.FromThread),
// beside its flow's file, and saves it when asked.
func (s *Server) flowTest(w http.ResponseWriter, r *http.Request, c *caller) error {
	rec, err := s.thread(r, c)
	if err != nil {
		return err
	}
	var in api.MakeFlowTest
	if err := readJSON(r, &in); err != nil {
		return err
	}
	if in.Save && !c.edits() {
		return &api.Error{Code: api.CodeForbidden, Message: "saving a flow test beside the flows takes an admin key (or the key trellis studio signs its page in with)"}
	}
	l, err := s.threadFlow(r.Context(), rec.Tenant, rec.ID, rec.Flow)
	if err != nil {
		return err
	}
	flowFile := l.flow.Path()
	base := strings.TrimSuffix(filepath.Base(flowFile), filepath.Ext(flowFile))
	testPath := filepath.Join(filepath.Dir(flowFile), base+"."+fileSafe(publicID(rec.ID))+testfile.Suffix)
	mt, err := testfile.FromThread(r.Context(), s.eng().Store, l.flow.Graph(), s.cfg.Kinds, rec.ID, testPath, filepath.Base(flowFile))
	if errors.Is(err, testfile.ErrNotReplayable) {
		return &api.Error{Code: api.CodeInvalidInput, Message: strings.ReplaceAll(err.Error(), rec.ID, publicID(rec.ID)),
			Details: map[string]string{"reason": "not_replayable"}}
	}
	if err != nil {
		return err
	}
	out := api.FlowTest{Text: string(mt.Text), Unasserted: mt.Unasserted, Passed: true}
	for _, res := range mt.Results {
		out.Passed = out.Passed && res.Passed()
	}
	var cassette []byte
	cassettePath := strings.TrimSuffix(testPath, testfile.Suffix) + ".cassette.yaml"
	if len(mt.Replies) > 0 {
		if cassette, err = testfile.WriteCassette(mt.Replies); err != nil {
			return err
		}
		out.Cassette = string(cassette)
	}
	p, err := s.project()
	if err != nil {
		return err
	}
	if out.Path, err = p.rel(testPath); err != nil {
		return err
	}
	if cassette != nil {
		out.CassettePath, _ = p.rel(cassettePath)
	}
	if in.Save {
		files := map[string][]byte{testPath: mt.Text}
		if cassette != nil {
			files[cassettePath] = cassette
		}
		if err := saveNew(files, in.Replace); err != nil {
			return err
		}
		out.Saved = true
	}
	// with an idempotency key, the answer is kept: the request sent
	// again is answered so, not refused for the files it saved
	made(r, rec.ID)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// fileSafe is a thread id as part of a file name.
func fileSafe(id string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, id)
}

// saveNew writes files that do not exist yet (or any, with replace): all
// or none.
func saveNew(files map[string][]byte, replace bool) error {
	saveMu.Lock()
	defer saveMu.Unlock()
	if !replace {
		for name := range files {
			if _, err := os.Stat(name); err == nil {
				return &api.Error{Code: api.CodeFileChanged, Message: fmt.Sprintf("%s exists: save with replace to write over it", filepath.Base(name))}
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	var written []string
	for name, b := range files {
		err := os.WriteFile(name, b, 0o644)
		if err != nil {
			for _, w := range written {
				os.Remove(w)
			}
			if isReadOnly(err) {
				return &api.Error{Code: api.CodeReadOnly, Message: fmt.Sprintf("the flow test cannot be saved: %s is read-only (%v); nothing was saved", filepath.Dir(name), errors.Unwrap(err))}
			}
			return fmt.Errorf("save %s: %w", filepath.Base(name), err)
		}
		written = append(written, name)
	}
	return nil
}
