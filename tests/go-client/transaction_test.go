package goclient

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// transactions decides each half message by its body: "commit", "rollback", or "check", which
// stays unknown until the broker checks back and is committed then. A check-back answers as
// the local transaction ended, as an application's would.
type transactions struct {
	mu      sync.Mutex
	checked map[string]int
}

func (l *transactions) ExecuteLocalTransaction(msg *primitive.Message) primitive.LocalTransactionState {
	switch string(msg.Body) {
	case "commit":
		return primitive.CommitMessageState
	case "rollback":
		return primitive.RollbackMessageState
	default:
		return primitive.UnkonwnState
	}
}

func (l *transactions) CheckLocalTransaction(msg *primitive.MessageExt) primitive.LocalTransactionState {
	l.mu.Lock()
	l.checked[string(msg.Body)]++
	l.mu.Unlock()
	if string(msg.Body) == "rollback" {
		return primitive.RollbackMessageState
	}
	return primitive.CommitMessageState
}

// Needs a broker that checks back soon (go-client-tests.sh starts ringmq with
// --transactionCheckInterval=1000 --transactionTimeOut=1000).
func TestTransactionsCommitRollBackAndAreCheckedBack(t *testing.T) {
	topic := name(t, "topic")
	// A plain send creates the topic (a half message does not).
	sendSync(t, startProducer(t), primitive.NewMessage(topic, []byte("plain")))
	decisions := &transactions{checked: map[string]int{}}
	p, err := rocketmq.NewTransactionProducer(decisions,
		producer.WithNsResolver(resolver()),
		producer.WithGroupName(name(t, "tx")),
		// The Go client answers check-backs only for the group of the first producer or
		// consumer of a client instance, so this producer needs an instance of its own.
		producer.WithInstanceName(name(t, "tx")))
	if err != nil {
		t.Fatalf("new transaction producer: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("start transaction producer: %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	for _, body := range []string{"commit", "rollback", "check"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		result, err := p.SendMessageInTransaction(ctx, primitive.NewMessage(topic, []byte(body)))
		cancel()
		if err != nil || result.Status != primitive.SendOK {
			t.Fatalf("half message %s: %v %v", body, result, err)
		}
	}
	got := newCollector()
	startPushConsumer(t, name(t, "cg"), topic, consumer.MessageSelector{}, got.collecting())
	got.waitFor(t, 3, deliveryTimeout)
	// A check-back of a half message whose end the broker has not recorded yet commits it
	// again (Apache RocketMQ 5 writes those records in batches every 3 s, so with a 1 s check
	// it does), so a committed message may arrive twice; the rolled-back one never.
	received := got.quiet(3 * time.Second)
	distinct := map[string]int{}
	for _, m := range received {
		distinct[string(m.Body)]++
	}
	if len(distinct) != 3 || distinct["check"] == 0 || distinct["commit"] == 0 || distinct["plain"] != 1 {
		t.Fatalf("consumer got %v, want check, commit and plain", distinct)
	}
	if len(received) > 3 {
		t.Logf("duplicates from check-backs: %v", distinct)
	}
	decisions.mu.Lock()
	defer decisions.mu.Unlock()
	if decisions.checked["check"] == 0 {
		t.Fatalf("the unknown transaction was never checked back: %v", decisions.checked)
	}
}
