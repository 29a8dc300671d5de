package amqp

import "errors"

var (
	// ErrTopologyMismatch is wrapped when a queue or exchange already exists with other
	// arguments (RabbitMQ 406 PRECONDITION_FAILED), e.g. a retry tier declared with another
	// x-message-ttl. RabbitMQ cannot change queue arguments in place: delete the queue (it holds
	// only messages waiting for a retry) or use a new topic.
	ErrTopologyMismatch = errors.New("amqp: topology already exists with other arguments")
	// ErrNotProvisioned is returned by ScheduleRetry for a topic whose retry tiers this adapter
	// has not declared: rejecting the message would let RabbitMQ drop it as unroutable.
	ErrNotProvisioned = errors.New("amqp: topic not provisioned; call Provision (router.Run does)")
	// ErrForeignMessage is returned by ScheduleRetry for a message that did not come from this
	// adapter's subscriber, so there is no delivery to reject.
	ErrForeignMessage = errors.New("amqp: message was not received through this adapter")
	// ErrUnroutable is wrapped when the broker returned a mandatory publish (Publish, retry tier
	// or DLQ) because no queue is bound for it; for a retry or dead letter the original is then
	// left unacknowledged.
	ErrUnroutable = errors.New("amqp: broker returned the message as unroutable")
	// ErrNotConfirmed is wrapped when the broker nacked a publish (publisher confirms), or
	// did not confirm it within Config.PublishTimeout.
	ErrNotConfirmed = errors.New("amqp: broker did not confirm the publish")
	// ErrBlocked is wrapped when a publish (Publish, a retry copy, a dead letter) is refused
	// at once because the broker blocked the publishing connection (connection.blocked,
	// during a memory or disk alarm): it would not be confirmed until the alarm clears.
	ErrBlocked = errors.New("amqp: the broker blocked the publishing connection (connection.blocked: memory or disk alarm)")
)
