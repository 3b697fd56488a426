// End-to-end tests of ringmq with the official Go client
// (github.com/apache/rocketmq-client-go/v2), run by scripts/go-client-tests.sh, which starts
// the broker and sets:
//
//	RINGMQ_NAMESRV  the name server (host:port), required
//	RINGMQ_BROKER   the broker's address (host:port), for the admin calls
//	RINGMQ_PREFIX   a prefix for topic and group names (default go-<unix time>), so that a
//	                broker shared with other runs is safe to use
//
// Every wait is bounded; a test that cannot see what it expects fails with what it saw.
package goclient

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// How long a test waits for messages it expects.
const deliveryTimeout = 60 * time.Second

var (
	namesrv    = os.Getenv("RINGMQ_NAMESRV")
	brokerAddr = os.Getenv("RINGMQ_BROKER")
	prefix     = os.Getenv("RINGMQ_PREFIX")
)

func TestMain(m *testing.M) {
	if namesrv == "" {
		fmt.Fprintln(os.Stderr, "RINGMQ_NAMESRV is not set: run scripts/go-client-tests.sh")
		os.Exit(2)
	}
	if prefix == "" {
		prefix = fmt.Sprintf("go-%d", time.Now().Unix())
	}
	// The client logs every rebalance and heartbeat at info.
	rlog.SetLogLevel("warn")
	os.Exit(m.Run())
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// name is a topic or group name of this run and test: PREFIX-TestName-kind.
func name(t *testing.T, kind string) string {
	return unsafeName.ReplaceAllString(fmt.Sprintf("%s-%s-%s", prefix, t.Name(), kind), "_")
}

func resolver() primitive.NsResolver {
	return primitive.NewPassthroughResolver([]string{namesrv})
}

// startProducer starts a producer of a group of its own, shut down when the test ends.
func startProducer(t *testing.T, opts ...producer.Option) rocketmq.Producer {
	t.Helper()
	all := append([]producer.Option{
		producer.WithNsResolver(resolver()),
		producer.WithGroupName(name(t, "pg")),
		producer.WithRetry(2),
	}, opts...)
	p, err := rocketmq.NewProducer(all...)
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("start producer: %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// sendSync sends one message and fails the test unless the broker answered SEND_OK.
func sendSync(t *testing.T, p rocketmq.Producer, msgs ...*primitive.Message) *primitive.SendResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	result, err := p.SendSync(ctx, msgs...)
	if err != nil {
		t.Fatalf("send to %s: %v", msgs[0].Topic, err)
	}
	if result.Status != primitive.SendOK {
		t.Fatalf("send to %s: status %v (%s)", msgs[0].Topic, result.Status, result)
	}
	return result
}

// collector keeps what a consumer's listener got.
type collector struct {
	mu       sync.Mutex
	messages []*primitive.MessageExt
	changed  chan struct{}
}

func newCollector() *collector {
	return &collector{changed: make(chan struct{}, 1)}
}

func (c *collector) add(msgs ...*primitive.MessageExt) {
	c.mu.Lock()
	c.messages = append(c.messages, msgs...)
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *collector) snapshot() []*primitive.MessageExt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*primitive.MessageExt(nil), c.messages...)
}

// bodies are the bodies received so far, sorted.
func (c *collector) bodies() []string {
	return bodiesOf(c.snapshot())
}

// waitFor waits until at least n messages arrived and returns them.
func (c *collector) waitFor(t *testing.T, n int, timeout time.Duration) []*primitive.MessageExt {
	t.Helper()
	deadline := time.After(timeout)
	for {
		got := c.snapshot()
		if len(got) >= n {
			return got
		}
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatalf("%d of %d messages after %v: %v", len(got), n, timeout, c.bodies())
		}
	}
}

// quiet returns what arrived once nothing more came for `idle` (bounded by deliveryTimeout).
func (c *collector) quiet(idle time.Duration) []*primitive.MessageExt {
	end := time.Now().Add(deliveryTimeout)
	for time.Now().Before(end) {
		select {
		case <-c.changed:
		case <-time.After(idle):
			return c.snapshot()
		}
	}
	return c.snapshot()
}

// listener is a push consumer's callback.
type listener func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error)

// collecting is a listener that keeps every message and answers ConsumeSuccess.
func (c *collector) collecting() listener {
	return func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		c.add(msgs...)
		return consumer.ConsumeSuccess, nil
	}
}

// startPushConsumer subscribes `group` to `topic` and starts it from the first offset; it
// is shut down when the test ends (or earlier, by the returned function).
func startPushConsumer(t *testing.T, group, topic string, selector consumer.MessageSelector,
	f listener, opts ...consumer.Option) (rocketmq.PushConsumer, func()) {
	t.Helper()
	all := append([]consumer.Option{
		consumer.WithNsResolver(resolver()),
		consumer.WithGroupName(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}, opts...)
	c, err := rocketmq.NewPushConsumer(all...)
	if err != nil {
		t.Fatalf("new push consumer: %v", err)
	}
	if err := c.Subscribe(topic, selector, f); err != nil {
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("start push consumer: %v", err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = c.Shutdown() }) }
	t.Cleanup(stop)
	return c, stop
}

// bodiesOf are the given messages' bodies, sorted.
func bodiesOf(msgs []*primitive.MessageExt) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	sort.Strings(out)
	return out
}

// numbered are `n` bodies "<label>-<i>", sorted as bodiesOf sorts.
func numbered(label string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", label, i)
	}
	sort.Strings(out)
	return out
}

// sameBodies fails unless got holds exactly the bodies of want (each once).
func sameBodies(t *testing.T, what string, got []*primitive.MessageExt, want []string) {
	t.Helper()
	have := bodiesOf(got)
	if strings.Join(have, ",") != strings.Join(want, ",") {
		t.Fatalf("%s: got %d messages %v, want %d %v", what, len(have), have, len(want), want)
	}
}
