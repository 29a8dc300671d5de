package kafka

// GuardTrips returns how many read timeouts made the adapter's connection guard condemn the
// idle connections of its clients (connguard.go).
func (a *Adapter) GuardTrips() int64 { return a.sc.Net.Proxy.Dialer.(*connGuard).trips.Load() }

// GuardSpared returns how many read timeouts of a JoinGroup or SyncGroup the guard did not take
// for a silent path.
func (a *Adapter) GuardSpared() int64 { return a.sc.Net.Proxy.Dialer.(*connGuard).spared.Load() }
