package flow

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

// A program that has loaded its flows and runs them does not keep the
// compiled flow format (most of a megabyte the collector would mark in
// every cycle): it goes once nothing holds it, Prepare holds it for the
// loads to come, and a load after it went compiles it again and finds
// what a load with it held finds.
func TestTheFlowFormatIsKeptOnlyWhileHeld(t *testing.T) {
	reg := kindtest.Registry()
	const good = `version: 1
name: kept
state: {schema: {type: object, properties: {n: {type: integer}}}}
nodes:
  a: {kind: set, set: {n: "1"}}
edges:
  - {from: START, to: a}
  - {from: a, to: END}
`
	const bad = `version: 1
name: kept
state: {schema: {type: object, properties: {n: {type: integer}}}}
nodes:
  a: {kind: set, set: {n: "1"}, retry: {attempts: many}}
  b: {kind: nosuch}
edges:
  - {from: START, to: a}
  - {from: a, to: END}
  - {form: a, to: b}
`
	kept := func() bool {
		formatMu.Lock()
		defer formatMu.Unlock()
		return formats[reg].Value() != nil
	}
	listed := func() bool {
		formatMu.Lock()
		defer formatMu.Unlock()
		_, ok := formats[reg]
		return ok
	}
	// gone is whether the format goes within a while of collections:
	// what the collector decides, however many cycles a busy machine
	// (or an object of the run time's still pointing at it for a cycle)
	// takes
	gone := func() bool {
		for deadline := time.Now().Add(30 * time.Second); kept() && time.Now().Before(deadline); {
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
		return !kept()
	}
	g, dl := LoadSource("kept.yaml", []byte(good), reg)
	if g == nil {
		t.Fatal(dl)
	}
	if !gone() {
		t.Fatal("the flow format outlived the load that compiled it: a loaded graph keeps it")
	}
	// the entry goes with it (cleanups run after the collection, on their own)
	for deadline := time.Now().Add(30 * time.Second); listed() && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if listed() {
		t.Fatal("the registry's entry stayed after its format was collected")
	}
	_, fresh := LoadSource("bad.yaml", []byte(bad), reg)

	release := Prepare(reg)
	runtime.GC()
	if !kept() {
		t.Fatal("Prepare did not keep the flow format")
	}
	_, held := LoadSource("bad.yaml", []byte(bad), reg)
	runtime.GC()
	if !kept() {
		t.Fatal("the flow format went while Prepare held it")
	}
	release()
	if !gone() {
		t.Fatal("the flow format stayed after Prepare's release")
	}
	if len(fresh) < 3 || fmt.Sprint(fresh) != fmt.Sprint(held) {
		t.Fatalf("a load compiling the format found\n%s\na load with it held found\n%s", fresh, held)
	}
	runtime.KeepAlive(g)
}
