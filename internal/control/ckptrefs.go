package control

import "github.com/virga-ml/virga"

// A checkpoint's files are deleted once no trial in memory refers to them
// (checkpointShared): a trial refers to its latest checkpoint
// (Trial.Checkpoint, which a trial continuing from its parent's starts
// with) and to each checkpoint it retains (trialState.ckpts). Rather than
// look for a content ID among every trial at each dropped checkpoint, which
// grows with the trials of a large search, the loop counts the references
// per ID as they change: a trial's count joins when it enters
// Controller.trials (track) and leaves when it leaves (untrack), and every
// change of a tracked trial's checkpoints goes through setCheckpoint,
// keepCheckpoint and dropCheckpoint.

// track adds ts to the trials in memory, with its references.
func (c *Controller) track(ts *trialState) {
	c.trials[ts.t.ID] = ts
	ts.tracked = true
	c.refs(ts, 1)
}

// untrack takes ts out of the trials in memory, with its references.
func (c *Controller) untrack(ts *trialState) {
	if c.trials[ts.t.ID] == ts {
		delete(c.trials, ts.t.ID)
	}
	if ts.tracked {
		c.refs(ts, -1)
		ts.tracked = false
	}
}

// refs adds sign times each of ts's references to the counts.
func (c *Controller) refs(ts *trialState, sign int) {
	c.ref(ts.t.Checkpoint, sign)
	for _, ck := range ts.ckpts {
		c.ref(ck.ID, sign)
	}
}

func (c *Controller) ref(id string, sign int) {
	n := c.ckptRefs[id] + sign
	if n == 0 {
		delete(c.ckptRefs, id)
		return
	}
	c.ckptRefs[id] = n
}

// setCheckpoint makes id ts's latest checkpoint.
func (c *Controller) setCheckpoint(ts *trialState, id string) {
	if ts.tracked {
		c.ref(ts.t.Checkpoint, -1)
		c.ref(id, 1)
	}
	ts.t.Checkpoint = id
}

// keepCheckpoint appends ck to ts's retained checkpoints.
func (c *Controller) keepCheckpoint(ts *trialState, ck virga.Checkpoint) {
	ts.ckpts = append(ts.ckpts, ck)
	if ts.tracked {
		c.ref(ck.ID, 1)
	}
}

// dropCheckpoint counts a checkpoint ts no longer retains (taken out of
// ts.ckpts by the caller).
func (c *Controller) dropCheckpoint(ts *trialState, ck string) {
	if ts.tracked {
		c.ref(ck, -1)
	}
}

// checkpointShared reports whether another trial in memory (or the same
// trial's retained list) still refers to the content id.
func (c *Controller) checkpointShared(self *trialState, id string) bool {
	for _, ck := range self.ckpts {
		if ck.ID == id {
			return true
		}
	}
	n := c.ckptRefs[id]
	if self.tracked && self.t.Checkpoint == id {
		n-- // self's own reference
	}
	return n > 0
}
