package kafka

// Sessions returns how many consumer-group sessions this adapter's subscriptions started: one
// per subscription, plus one per rebalance.
func (a *Adapter) Sessions() int64 { return a.sessions.Load() }
