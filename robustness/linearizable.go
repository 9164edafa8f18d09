package robustness

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/stampede-go/stampede/robustness/wire"
)

// The register keys ("r0"…) are written only by Set, Delete and Clear and
// read only by Get: each is a register, and the history of each must be
// linearizable (checked by porcupine, as etcd's robustness suite does).
// Two documented allowances shape the model:
//   - a Get that begins while a read of the same key is in flight in its
//     process may share that read's answer (docs/guarantees.md,
//     "Reads across replicas"): its interval is widened back to that read's invoke;
//   - a Clear is complete when it returns: until then another replica may
//     still trust the marks it read before (InvalidationWait), so a read
//     during a Clear may see the register either way, even after another
//     read saw it emptied; such reads are left out;
//   - Redis restarted without persistence, or failed over, loses what it
//     held: the loss is an operation that empties every register, anywhere
//     within the fault's window.
//
// With L1 on, another replica's read may lag by the cross-replica window,
// which no register has; those runs rely on the write checker instead.

// regInput is a register operation.
type regInput struct {
	op    string // "get", "set", "delete" (Clear and a data loss are deletes)
	value string // set: the value's ID
}

// regOutput is a Get's answer ("" when nothing was found).
type regOutput struct{ value string }

var registerModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		switch in.op {
		case "set":
			return true, in.value
		case "delete":
			return true, ""
		}
		return output.(regOutput).value == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		switch in.op {
		case "set":
			return "set " + in.value
		case "delete":
			return "delete"
		}
		if v := output.(regOutput).value; v != "" {
			return "get -> " + v
		}
		return "get -> none"
	},
	DescribeState: func(state any) string {
		if s := state.(string); s != "" {
			return s
		}
		return "none"
	},
}

// registerHistories turns h into one porcupine history per register (per
// replica and register in local mode, where each replica is its own store).
func registerHistories(sc Scenario, h *History) map[string][]porcupine.Operation {
	const never = math.MaxInt64
	out := map[string][]porcupine.Operation{}
	client := map[string]int{}
	clientOf := func(name string) int {
		if _, ok := client[name]; !ok {
			client[name] = len(client)
		}
		return client[name]
	}
	registers := map[string]bool{}
	for _, o := range h.Ops {
		if strings.HasPrefix(o.Req.Key, "r") {
			registers[o.Req.Key] = true
		}
	}
	partition := func(replica, key string) string {
		if sc.Mode == "local" {
			return replica + "/" + key
		}
		return key
	}
	// Gets in flight per replica and key, to widen a Get to the read it may
	// share.
	var gets []*Op
	for _, o := range h.Ops {
		if o.Req.Op == wire.OpGet && o.Ok() && strings.HasPrefix(o.Req.Key, "r") {
			gets = append(gets, o)
		}
	}
	sort.Slice(gets, func(i, j int) bool { return gets[i].Invoke < gets[j].Invoke })
	widened := map[*Op]time.Duration{}
	for i, g := range gets {
		call := g.Invoke
		for _, p := range gets[:i] {
			if p.Replica == g.Replica && p.Req.Key == g.Req.Key && p.Return >= call && p.Invoke < call {
				call = min(call, widened[p])
			}
		}
		widened[g] = call
	}
	var clears []*Op
	for _, o := range h.Ops {
		if o.Req.Op == wire.OpClear {
			clears = append(clears, o)
		}
	}
	duringClear := func(g *Op) bool {
		for _, c := range clears {
			end := c.Return
			if c.Unknown { // its process died: its marks may still have been written
				end += time.Second
			}
			if c.Invoke <= g.Return && g.Invoke <= end {
				return true
			}
		}
		return false
	}
	for _, o := range h.Ops {
		ret := int64(o.Return)
		switch {
		case o.Unknown:
			ret = never
		case o.Resp.Err != "" && o.Req.Op == wire.OpGet:
			continue // a failed read says nothing
		case o.Resp.Err != "":
			ret = never // a failed write may have happened (ErrUnavailable says so too: a step failed, or the breaker refused it)
		}
		cid := clientOf(o.Replica + fmt.Sprint(o.Req.ID))
		switch o.Req.Op {
		case wire.OpGet:
			if !strings.HasPrefix(o.Req.Key, "r") || duringClear(o) {
				continue
			}
			var v string
			if o.Resp.Value != nil {
				v = o.Resp.Value.ID
			}
			k := partition(o.Replica, o.Req.Key)
			out[k] = append(out[k], porcupine.Operation{ClientId: cid, Input: regInput{op: "get"}, Call: int64(widened[o]), Output: regOutput{v}, Return: ret})
		case wire.OpSet, wire.OpDelete:
			if !strings.HasPrefix(o.Req.Key, "r") {
				continue
			}
			in := regInput{op: "delete"}
			if o.Req.Op == wire.OpSet {
				in = regInput{op: "set", value: fmt.Sprintf("s%d", o.Req.ID)}
			}
			k := partition(o.Replica, o.Req.Key)
			out[k] = append(out[k], porcupine.Operation{ClientId: cid, Input: in, Call: int64(o.Invoke), Output: regOutput{}, Return: ret})
		case wire.OpClear:
			for r := range registers {
				k := partition(o.Replica, r)
				out[k] = append(out[k], porcupine.Operation{ClientId: cid, Input: regInput{op: "delete"}, Call: int64(o.Invoke), Output: regOutput{}, Return: ret})
			}
		}
	}
	// Data loss: an emptying of every register somewhere within the fault.
	for _, f := range faultWindows(h, sc.settle()) {
		lossy := strings.HasPrefix(f.what, "redis-kill") && !sc.Persistence ||
			strings.HasPrefix(f.what, "failover") || strings.HasPrefix(f.what, "cluster-master")
		if !lossy {
			continue
		}
		cid := clientOf("loss" + fmt.Sprint(f.from))
		for r := range registers {
			out[r] = append(out[r], porcupine.Operation{ClientId: cid, Input: regInput{op: "delete"}, Call: int64(f.from), Output: regOutput{}, Return: int64(f.to)})
		}
	}
	return out
}

// checkRegisters checks each register's history for linearizability.
func checkRegisters(sc Scenario, h *History) []Violation {
	if sc.Options.L1Size > 0 {
		return nil
	}
	var out []Violation
	hs := registerHistories(sc, h)
	keys := make([]string, 0, len(hs))
	for k := range hs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		res, info := porcupine.CheckOperationsVerbose(registerModel, hs[k], 20*time.Second)
		if res == porcupine.Illegal {
			out = append(out, Violation{Property: "linearizable register", Detail: k + " is not linearizable", info: &info})
		}
	}
	return out
}
