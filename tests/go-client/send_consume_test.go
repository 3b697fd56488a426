package goclient

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// The Go client writes the message ids it makes (MsgID) in lower case, the broker upper case.
var hex32 = regexp.MustCompile(`^[0-9A-Fa-f]{32}$`)

func TestSyncSendsArriveOnceAtAPushConsumerWithTheirKeysAndTags(t *testing.T) {
	topic := name(t, "topic")
	p := startProducer(t)
	sent := map[string]*primitive.SendResult{}
	lastOffset := map[int]int64{}
	for i := 0; i < 40; i++ {
		body := fmt.Sprintf("sync-%03d", i)
		msg := primitive.NewMessage(topic, []byte(body)).
			WithTag(fmt.Sprintf("tag%d", i%3)).
			WithKeys([]string{fmt.Sprintf("key-%d", i)})
		result := sendSync(t, p, msg)
		if !hex32.MatchString(result.MsgID) || !hex32.MatchString(result.OffsetMsgID) {
			t.Fatalf("message ids %q / %q are not 32 hex digits", result.MsgID, result.OffsetMsgID)
		}
		queue := result.MessageQueue.QueueId
		if last, seen := lastOffset[queue]; seen && result.QueueOffset != last+1 {
			t.Fatalf("queue %d: offset %d after %d", queue, result.QueueOffset, last)
		}
		lastOffset[queue] = result.QueueOffset
		sent[body] = result
	}
	if len(lastOffset) < 2 {
		t.Fatalf("40 sends used only the queues %v", lastOffset)
	}
	got := newCollector()
	startPushConsumer(t, name(t, "cg"), topic, consumer.MessageSelector{}, got.collecting())
	got.waitFor(t, 40, deliveryTimeout)
	received := got.quiet(2 * time.Second)
	sameBodies(t, "push consumer", received, numbered("sync", 40))
	for _, m := range received {
		result := sent[string(m.Body)]
		var i int
		fmt.Sscanf(string(m.Body), "sync-%d", &i)
		switch {
		case m.MsgId != result.MsgID:
			t.Errorf("%s: msgId %s, the send said %s", m.Body, m.MsgId, result.MsgID)
		case m.OffsetMsgId != result.OffsetMsgID:
			t.Errorf("%s: offsetMsgId %s, the send said %s", m.Body, m.OffsetMsgId, result.OffsetMsgID)
		case m.Queue.QueueId != result.MessageQueue.QueueId || m.QueueOffset != result.QueueOffset:
			t.Errorf("%s: queue %d offset %d, the send said %d / %d", m.Body, m.Queue.QueueId,
				m.QueueOffset, result.MessageQueue.QueueId, result.QueueOffset)
		case m.GetTags() != fmt.Sprintf("tag%d", i%3) || m.GetKeys() != fmt.Sprintf("key-%d", i):
			t.Errorf("%s: tags %q keys %q", m.Body, m.GetTags(), m.GetKeys())
		case m.ReconsumeTimes != 0 || m.BornTimestamp <= 0 || m.StoreTimestamp < m.BornTimestamp:
			t.Errorf("%s: reconsumeTimes %d born %d stored %d", m.Body, m.ReconsumeTimes,
				m.BornTimestamp, m.StoreTimestamp)
		}
	}
}

func TestAsyncOnewayAndBatchSendsAreAllStored(t *testing.T) {
	topic := name(t, "topic")
	p := startProducer(t)
	// The first send creates the topic, so that async and oneway sends find its route.
	sendSync(t, p, primitive.NewMessage(topic, []byte("first-000")))
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := 0; i < 30; i++ {
		wg.Add(1)
		err := p.SendAsync(context.Background(), func(_ context.Context, result *primitive.SendResult, err error) {
			defer wg.Done()
			if err != nil || result.Status != primitive.SendOK {
				failed.Add(1)
			}
		}, primitive.NewMessage(topic, []byte(fmt.Sprintf("async-%03d", i))))
		if err != nil {
			t.Fatalf("async send %d: %v", i, err)
		}
	}
	waitGroup(t, &wg, 30*time.Second, "async callbacks")
	if failed.Load() != 0 {
		t.Fatalf("%d async sends failed", failed.Load())
	}
	for i := 0; i < 10; i++ {
		msg := primitive.NewMessage(topic, []byte(fmt.Sprintf("oneway-%03d", i)))
		if err := p.SendOneWay(context.Background(), msg); err != nil {
			t.Fatalf("oneway send %d: %v", i, err)
		}
	}
	var batch []*primitive.Message
	for i := 0; i < 10; i++ {
		batch = append(batch, primitive.NewMessage(topic, []byte(fmt.Sprintf("batch-%03d", i))))
	}
	result := sendSync(t, p, batch...)
	if result.MessageQueue == nil {
		t.Fatalf("batch result without a queue: %s", result)
	}
	got := newCollector()
	startPushConsumer(t, name(t, "cg"), topic, consumer.MessageSelector{}, got.collecting())
	got.waitFor(t, 51, deliveryTimeout)
	want := append(append(append(numbered("async", 30), numbered("batch", 10)...),
		numbered("first", 1)...), numbered("oneway", 10)...)
	sameBodies(t, "push consumer", got.quiet(2*time.Second), want)
	// A batch lands in one queue at consecutive offsets, in the order sent.
	var offsets []int64
	for _, m := range got.snapshot() {
		if len(m.Body) > 6 && string(m.Body[:6]) == "batch-" {
			if m.Queue.QueueId != result.MessageQueue.QueueId {
				t.Fatalf("%s in queue %d, the batch went to %d", m.Body, m.Queue.QueueId,
					result.MessageQueue.QueueId)
			}
			var i int
			fmt.Sscanf(string(m.Body), "batch-%d", &i)
			offsets = append(offsets, m.QueueOffset-int64(i))
		}
	}
	for _, base := range offsets {
		if base != offsets[0] {
			t.Fatalf("batch offsets minus their index differ: %v", offsets)
		}
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, timeout time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("%s not done after %v", what, timeout)
	}
}

func TestMessagesOfOneShardingKeyArriveInOrderAtAnOrderlyConsumer(t *testing.T) {
	topic := name(t, "topic")
	p := startProducer(t, producer.WithQueueSelector(producer.NewHashQueueSelector()))
	sendSync(t, p, primitive.NewMessage(topic, []byte("create")).WithShardingKey("none"))
	const keys, perKey = 4, 25
	queues := map[int]bool{}
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			msg := primitive.NewMessage(topic, []byte(fmt.Sprintf("k%d-%03d", k, i))).
				WithShardingKey(fmt.Sprintf("order-%d", k))
			queues[sendSync(t, p, msg).MessageQueue.QueueId] = true
		}
	}
	var mu sync.Mutex
	next := map[string]int{}
	var outOfOrder []string
	got := newCollector()
	startPushConsumer(t, name(t, "cg"), topic, consumer.MessageSelector{},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			for _, m := range msgs {
				var k, i int
				if n, _ := fmt.Sscanf(string(m.Body), "k%d-%d", &k, &i); n != 2 {
					continue
				}
				key := fmt.Sprintf("k%d", k)
				if i != next[key] {
					outOfOrder = append(outOfOrder, fmt.Sprintf("%s after %d", m.Body, next[key]-1))
				}
				next[key] = i + 1
			}
			mu.Unlock()
			got.add(msgs...)
			return consumer.ConsumeSuccess, nil
		}, consumer.WithConsumerOrder(true))
	got.waitFor(t, keys*perKey+1, deliveryTimeout)
	mu.Lock()
	defer mu.Unlock()
	if len(outOfOrder) > 0 {
		t.Fatalf("out of order: %v", outOfOrder)
	}
	for k := 0; k < keys; k++ {
		if next[fmt.Sprintf("k%d", k)] != perKey {
			t.Fatalf("key %d: %d messages in order, want %d", k, next[fmt.Sprintf("k%d", k)], perKey)
		}
	}
	if len(queues) < 2 {
		t.Fatalf("%d keys all hashed to one queue %v; the test shows nothing", keys, queues)
	}
}

func TestADelayLevelTwoMessageArrivesFiveSecondsLater(t *testing.T) {
	topic := name(t, "topic")
	p := startProducer(t)
	sendSync(t, p, primitive.NewMessage(topic, []byte("now")))
	got := newCollector()
	arrived := map[string]time.Time{}
	var mu sync.Mutex
	startPushConsumer(t, name(t, "cg"), topic, consumer.MessageSelector{},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			for _, m := range msgs {
				arrived[string(m.Body)] = time.Now()
			}
			mu.Unlock()
			got.add(msgs...)
			return consumer.ConsumeSuccess, nil
		})
	got.waitFor(t, 1, deliveryTimeout)
	sentAt := time.Now()
	sendSync(t, p, primitive.NewMessage(topic, []byte("later")).WithDelayTimeLevel(2))
	got.waitFor(t, 2, deliveryTimeout)
	mu.Lock()
	waited := arrived["later"].Sub(sentAt)
	mu.Unlock()
	// Level 2 is 5 s; the broker times it from the store timestamp, after sentAt.
	if waited < 5*time.Second || waited > 6*time.Second {
		t.Fatalf("the level-2 message arrived %v after it was sent", waited)
	}
	if m := got.snapshot()[1]; m.Topic != topic || string(m.Body) != "later" {
		t.Fatalf("delivered %q as topic %q", m.Body, m.Topic)
	}
}

func TestTagAndSqlSelectorsDeliverOnlyWhatTheySelect(t *testing.T) {
	topic := name(t, "topic")
	p := startProducer(t)
	for i := 0; i < 15; i++ {
		msg := primitive.NewMessage(topic, []byte(fmt.Sprintf("%c-%03d", 'a'+i%3, i)))
		msg.WithTag(string(rune('a' + i%3)))
		msg.WithProperty("n", fmt.Sprint(i))
		sendSync(t, p, msg)
	}
	tags := newCollector()
	startPushConsumer(t, name(t, "tags"), topic,
		consumer.MessageSelector{Type: consumer.TAG, Expression: "a || b"}, tags.collecting())
	sql := newCollector()
	startPushConsumer(t, name(t, "sql"), topic,
		consumer.MessageSelector{Type: consumer.SQL92, Expression: "n >= 10 AND TAGS <> 'c'"},
		sql.collecting())
	tags.waitFor(t, 10, deliveryTimeout)
	sql.waitFor(t, 3, deliveryTimeout)
	want := []string{}
	for i := 0; i < 15; i++ {
		if i%3 != 2 {
			want = append(want, fmt.Sprintf("%c-%03d", 'a'+i%3, i))
		}
	}
	sameBodies(t, "tags a || b", tags.quiet(2*time.Second), sortedCopy(want))
	sameBodies(t, "n >= 10 AND TAGS <> 'c'", sql.quiet(time.Second),
		sortedCopy([]string{"b-010", "a-012", "b-013"}))
}

func TestARetryLaterMessageComesBackAndThenGoesToTheDeadLetterQueue(t *testing.T) {
	topic := name(t, "topic")
	group := name(t, "cg")
	p := startProducer(t)
	sendSync(t, p, primitive.NewMessage(topic, []byte("comes-back")))
	sendSync(t, p, primitive.NewMessage(topic, []byte("dead")))
	got := newCollector()
	startPushConsumer(t, group, topic, consumer.MessageSelector{},
		func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			got.add(msgs...)
			for _, m := range msgs {
				if string(m.Body) == "dead" || m.ReconsumeTimes == 0 {
					// Level 1 (1 s) instead of the ladder's 10 s.
					if concurrent, ok := primitive.GetConcurrentlyCtx(ctx); ok {
						concurrent.DelayLevelWhenNextConsume = 1
					}
					return consumer.ConsumeRetryLater, nil
				}
			}
			return consumer.ConsumeSuccess, nil
		}, consumer.WithMaxReconsumeTimes(2), consumer.WithConsumeMessageBatchMaxSize(1))
	// comes-back: twice (0, then 1 and consumed); dead: 0, 1 and 2, then the DLQ.
	got.waitFor(t, 5, deliveryTimeout)
	times := map[string][]int32{}
	for _, m := range got.quiet(3 * time.Second) {
		if m.Topic != topic {
			t.Fatalf("%s delivered as topic %q", m.Body, m.Topic)
		}
		times[string(m.Body)] = append(times[string(m.Body)], m.ReconsumeTimes)
	}
	if fmt.Sprint(times["comes-back"]) != "[0 1]" || fmt.Sprint(times["dead"]) != "[0 1 2]" {
		t.Fatalf("reconsume times of each delivery: %v", times)
	}
	dlq := newCollector()
	startPushConsumer(t, name(t, "dlq-reader"), "%DLQ%"+group, consumer.MessageSelector{},
		dlq.collecting())
	dlq.waitFor(t, 1, deliveryTimeout)
	sameBodies(t, "dead-letter queue", dlq.quiet(2*time.Second), []string{"dead"})
}

func TestBroadcastingConsumersEachGetEveryMessage(t *testing.T) {
	topic := name(t, "topic")
	group := name(t, "cg")
	p := startProducer(t)
	sendSync(t, p, primitive.NewMessage(topic, []byte("b-000")))
	var collectors []*collector
	for i := 0; i < 2; i++ {
		c := newCollector()
		collectors = append(collectors, c)
		startPushConsumer(t, group, topic, consumer.MessageSelector{}, c.collecting(),
			consumer.WithConsumerModel(consumer.BroadCasting),
			consumer.WithInstance(fmt.Sprintf("%s-%d", group, i)))
	}
	for i := 1; i < 20; i++ {
		sendSync(t, p, primitive.NewMessage(topic, []byte(fmt.Sprintf("b-%03d", i))))
	}
	for i, c := range collectors {
		c.waitFor(t, 20, deliveryTimeout)
		sameBodies(t, fmt.Sprintf("broadcast consumer %d", i), c.quiet(2*time.Second), numbered("b", 20))
	}
}

func TestAPullConsumerReadsAQueueFromAnOffset(t *testing.T) {
	topic := name(t, "topic")
	// A plain send creates the topic; the manual selector then needs a queue of its route.
	sendSync(t, startProducer(t), primitive.NewMessage(topic, []byte("created")))
	queue := fetchQueues(t, startAdmin(t), topic)[0]
	p := startProducer(t, producer.WithGroupName(name(t, "manual")),
		producer.WithQueueSelector(producer.NewManualQueueSelector()))
	first := primitive.NewMessage(topic, []byte("p-000"))
	first.Queue = queue
	base := sendSync(t, p, first).QueueOffset
	for i := 1; i < 10; i++ {
		msg := primitive.NewMessage(topic, []byte(fmt.Sprintf("p-%03d", i)))
		msg.Queue = queue
		if result := sendSync(t, p, msg); result.QueueOffset != base+int64(i) {
			t.Fatalf("send %d: offset %d, want %d", i, result.QueueOffset, base+int64(i))
		}
	}
	pc, err := rocketmq.NewPullConsumer(consumer.WithNsResolver(resolver()),
		consumer.WithGroupName(name(t, "pull")))
	if err != nil {
		t.Fatalf("new pull consumer: %v", err)
	}
	if err := pc.Assign(topic, []*primitive.MessageQueue{queue}); err != nil {
		t.Fatalf("assign %v: %v", queue, err)
	}
	if err := pc.Start(); err != nil {
		t.Fatalf("start pull consumer: %v", err)
	}
	t.Cleanup(func() { _ = pc.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	result, err := pc.PullFrom(ctx, queue, base+3, 5)
	if err != nil {
		t.Fatalf("pull from %d: %v", base+3, err)
	}
	if result.Status != primitive.PullFound || result.NextBeginOffset != base+8 ||
		result.MaxOffset != base+10 {
		t.Fatalf("pull from %d: %s", base+3, result)
	}
	want := []string{"p-003", "p-004", "p-005", "p-006", "p-007"}
	sameBodies(t, "pulled", result.GetMessageExts(), want)
	for i, m := range result.GetMessageExts() {
		if m.QueueOffset != base+3+int64(i) {
			t.Fatalf("message %d at offset %d", i, m.QueueOffset)
		}
	}
	// By store time: before every message the queue's first offset, after every one its end.
	if offset, err := pc.OffsetForTimestamp(queue, time.Now().Add(-time.Hour).UnixMilli()); err != nil || offset != 0 {
		t.Fatalf("offset an hour ago: %d %v, want 0", offset, err)
	}
	if offset, err := pc.OffsetForTimestamp(queue, time.Now().Add(time.Hour).UnixMilli()); err != nil || offset != base+10 {
		t.Fatalf("offset in an hour: %d %v, want %d", offset, err, base+10)
	}
	result, err = pc.PullFrom(ctx, queue, base+10, 5)
	if err != nil {
		t.Fatalf("pull from the end: %v", err)
	}
	if result.Status != primitive.PullNoNewMsg || result.NextBeginOffset != base+10 {
		t.Fatalf("pull from the end: %s", result)
	}
}

func startAdmin(t *testing.T) admin.Admin {
	t.Helper()
	a, err := admin.NewAdmin(admin.WithResolver(resolver()))
	if err != nil {
		t.Fatalf("new admin: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// fetchQueues waits (bounded) until the name server has a route for topic.
func fetchQueues(t *testing.T, a admin.Admin, topic string) []*primitive.MessageQueue {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		queues, err := a.FetchPublishMessageQueues(context.Background(), topic)
		if err == nil && len(queues) > 0 {
			return queues
		}
		if time.Now().After(deadline) {
			t.Fatalf("no route for %s after 30 s: %v", topic, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestCommittedOffsetsSurviveAConsumerRestart(t *testing.T) {
	topic := name(t, "topic")
	group := name(t, "cg")
	p := startProducer(t)
	for i := 0; i < 10; i++ {
		sendSync(t, p, primitive.NewMessage(topic, []byte(fmt.Sprintf("before-%03d", i))))
	}
	first := newCollector()
	_, stop := startPushConsumer(t, group, topic, consumer.MessageSelector{}, first.collecting())
	first.waitFor(t, 10, deliveryTimeout)
	sameBodies(t, "first consumer", first.quiet(time.Second), numbered("before", 10))
	stop() // commits its offsets to the broker
	for i := 0; i < 5; i++ {
		sendSync(t, p, primitive.NewMessage(topic, []byte(fmt.Sprintf("after-%03d", i))))
	}
	second := newCollector()
	startPushConsumer(t, group, topic, consumer.MessageSelector{}, second.collecting())
	second.waitFor(t, 5, deliveryTimeout)
	sameBodies(t, "the restarted consumer", second.quiet(3*time.Second), numbered("after", 5))
}

func TestAdminCreatesATopicWithItsQueuesAndDeletesIt(t *testing.T) {
	if brokerAddr == "" {
		t.Skip("RINGMQ_BROKER is not set")
	}
	topic := name(t, "topic")
	a := startAdmin(t)
	ctx := context.Background()
	err := a.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(brokerAddr),
		admin.WithReadQueueNums(3), admin.WithWriteQueueNums(3))
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	queues := fetchQueues(t, a, topic)
	if len(queues) != 3 {
		t.Fatalf("%d queues, want 3: %v", len(queues), queues)
	}
	list, err := a.FetchAllTopicList(ctx)
	if err != nil {
		t.Fatalf("topic list: %v", err)
	}
	found := false
	for _, name := range list.TopicList {
		found = found || name == topic
	}
	if !found {
		t.Fatalf("%s not in the topic list (%d topics)", topic, len(list.TopicList))
	}
	p := startProducer(t)
	for i := 0; i < 6; i++ {
		result := sendSync(t, p, primitive.NewMessage(topic, []byte(fmt.Sprintf("q-%d", i))))
		if result.MessageQueue.QueueId >= 3 {
			t.Fatalf("sent to queue %d of a 3-queue topic", result.MessageQueue.QueueId)
		}
	}
	if err := a.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(brokerAddr)); err != nil {
		t.Fatalf("delete topic: %v", err)
	}
	list, err = a.FetchAllTopicList(ctx)
	if err != nil {
		t.Fatalf("topic list after the delete: %v", err)
	}
	for _, name := range list.TopicList {
		if name == topic {
			t.Fatalf("%s still listed after its deletion", topic)
		}
	}
}

func sortedCopy(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

func TestLargeBodiesTheClientCompressesComeBackWhole(t *testing.T) {
	topic := name(t, "topic")
	p := startProducer(t) // compresses bodies over 4 KiB
	compressible := []byte(strings.Repeat("ringmq compresses nothing itself; ", 2000))
	random := make([]byte, 20000)
	rand.New(rand.NewSource(1)).Read(random)
	small := []byte("small")
	for _, body := range [][]byte{compressible, random, small} {
		sendSync(t, p, primitive.NewMessage(topic, body))
	}
	got := newCollector()
	startPushConsumer(t, name(t, "cg"), topic, consumer.MessageSelector{}, got.collecting())
	got.waitFor(t, 3, deliveryTimeout)
	received := got.quiet(2 * time.Second)
	if len(received) != 3 {
		t.Fatalf("%d messages, want 3", len(received))
	}
	for _, want := range [][]byte{compressible, random, small} {
		found := false
		for _, m := range received {
			found = found || bytes.Equal(m.Body, want)
		}
		if !found {
			t.Fatalf("no message came back with the %d-byte body sent", len(want))
		}
	}
}
