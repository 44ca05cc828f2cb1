// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * The device's counters (SPEC "Counters", with CAPS.COUNTERS) as rdma hw
 * counters: one rdma_stat_desc per enum counter value the device has, named
 * by its lowercased hw-spec name (tx_packets), for port 1 (`rdma statistic
 * show link`, ports/1/hw_counters/ in sysfs) and for rdma_counters (`rdma
 * statistic qp`), each the sum of the QPs bound to it.
 *
 * The device counts per port and per QP, while rdma's model is that of
 * exclusive counter sets (mlx5's Q counters): a QP bound to an rdma_counter
 * counts there and no longer in the port's default set, and ib_core shows a
 * link as its default set plus every rdma_counter's values (of live
 * counters, and what released ones had counted). So that a link still sums
 * to the device's port counters:
 * - an rdma_counter's value is what its bound QPs counted since they were
 *   bound (QUERY_COUNTERS QP now minus at bind time), plus what QPs unbound
 *   from it counted while bound (its base);
 * - the port's default set is QUERY_COUNTERS PORT minus what every bound QP
 *   counted since it was bound, minus @moved (the part of every QP unbound so
 *   far); it is read after the QPs, so traffic between the reads can only
 *   make it larger, never wrap it below zero.
 * Values are numbers from the device: u64 arithmetic modulo 2^64, as theirs.
 *
 * A QP whose read fails when it is unbound (a dead device) keeps the values
 * of its previous read: what it counted since stays in the default set.
 */
#include <linux/jiffies.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/string_helpers.h>
#include <rdma/rdma_counter.h>

#include "vrnic.h"

/* What the QPs bound to one rdma_counter counted (dev->cnt.counters). */
struct vrnic_cnt {
	u64 base[VRNIC_COUNTER_COUNT];	/* of the QPs unbound from it */
	struct list_head qps;		/* struct vrnic_cnt_qp */
	unsigned long read_at;		/* jiffies of the last read of all QPs */
	bool fresh;			/* stats hold that read; no unbind since */
};

/* A QP bound to an rdma_counter: its counters when bound and when last read. */
struct vrnic_cnt_qp {
	struct list_head node;		/* in vrnic_cnt.qps */
	struct ib_qp *ibqp;
	u32 qpn;			/* the device's */
	u64 at_bind[VRNIC_COUNTER_COUNT];
	u64 last[VRNIC_COUNTER_COUNT];
};

/*
 * The port's (@scope PORT) or QP @qpn's counters into @vals (c->num values);
 * @vals is left alone on failure. Called with c->lock (the scratch answer).
 */
static int vrnic_cnt_read(struct vrnic_dev *dev, u8 scope, u32 qpn, u64 *vals)
{
	struct vrnic_counters *c = &dev->cnt;
	u32 count, i;
	int err;

	err = vrnic_cmd_query_counters(dev, scope, qpn, c->raw, c->num, &count);
	if (err)
		return err;
	/* More than asked for: no more than that was written. Fewer: broken. */
	if (count != c->num) {
		dev_warn_ratelimited(&dev->pdev->dev,
				     "QUERY_COUNTERS %s %u: %u values for %u\n",
				     vrnic_counter_scope_name(scope), qpn,
				     count, c->num);
		if (count < c->num)
			return -EIO;
	}
	for (i = 0; i < c->num; i++)
		vals[i] = le64_to_cpu(c->raw[i]);
	return 0;
}

/* Read bound QP @b and add what it counted since it was bound to @sum. */
static int vrnic_cnt_qp_add(struct vrnic_dev *dev, struct vrnic_cnt_qp *b,
			    u64 *sum)
{
	u32 i;
	int err;

	err = vrnic_cnt_read(dev, VRNIC_COUNTER_SCOPE_QP, b->qpn, b->last);
	if (err)
		return err;
	for (i = 0; i < dev->cnt.num; i++)
		sum[i] += b->last[i] - b->at_bind[i];
	return 0;
}

static struct rdma_hw_stats *vrnic_alloc_stats(struct vrnic_dev *dev)
{
	return rdma_alloc_hw_stats_struct(dev->cnt.descs, dev->cnt.num,
					  RDMA_HW_STATS_DEFAULT_LIFESPAN);
}

static struct rdma_hw_stats *vrnic_alloc_hw_port_stats(struct ib_device *ibdev,
						       u32 port)
{
	return vrnic_alloc_stats(to_vdev(ibdev));
}

/* The port's default set: see the file comment. */
static int vrnic_get_hw_stats(struct ib_device *ibdev,
			      struct rdma_hw_stats *stats, u32 port, int index)
{
	struct vrnic_dev *dev = to_vdev(ibdev);
	struct vrnic_counters *c = &dev->cnt;
	u32 i, n = min_t(u32, stats->num_counters, c->num);
	struct vrnic_cnt_qp *b;
	struct vrnic_cnt *cnt;
	unsigned long id;
	int err;

	if (port != VRNIC_PORT_NUM)
		return -EINVAL;

	mutex_lock(&c->lock);
	memcpy(c->sum, c->moved, sizeof(c->sum));
	xa_for_each(&c->counters, id, cnt) {
		list_for_each_entry(b, &cnt->qps, node) {
			err = vrnic_cnt_qp_add(dev, b, c->sum);
			if (err)
				goto out;
		}
	}
	err = vrnic_cnt_read(dev, VRNIC_COUNTER_SCOPE_PORT, 0, c->now);
	if (err)
		goto out;
	for (i = 0; i < n; i++)
		stats->value[i] = c->now[i] - c->sum[i];
	err = n;
out:
	mutex_unlock(&c->lock);
	return err;
}

static struct vrnic_cnt_qp *vrnic_cnt_find(struct vrnic_cnt *cnt,
					   struct ib_qp *ibqp)
{
	struct vrnic_cnt_qp *b;

	list_for_each_entry(b, &cnt->qps, node)
		if (b->ibqp == ibqp)
			return b;
	return NULL;
}

/*
 * Called with the rdma_counter's lock. A counter with id 0 is new: it gets
 * its id here, and keeps none if the bind fails (the core then frees it
 * without counter_dealloc).
 */
static int vrnic_counter_bind_qp(struct rdma_counter *counter,
				 struct ib_qp *ibqp)
{
	struct vrnic_dev *dev = to_vdev(ibqp->device);
	struct vrnic_counters *c = &dev->cnt;
	struct vrnic_cnt *cnt;
	struct vrnic_cnt_qp *b;
	bool new = !counter->id;
	u32 id = counter->id;
	int err;

	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b)
		return -ENOMEM;
	b->ibqp = ibqp;
	b->qpn = to_vqp(ibqp)->qpn;

	mutex_lock(&c->lock);
	if (new) {
		cnt = kzalloc(sizeof(*cnt), GFP_KERNEL);
		if (!cnt) {
			err = -ENOMEM;
			goto err_unlock;
		}
		INIT_LIST_HEAD(&cnt->qps);
		/* Cyclic: the core's restrack may still hold a released id. */
		err = xa_alloc_cyclic(&c->counters, &id, cnt, xa_limit_32b,
				      &c->next_id, GFP_KERNEL);
		if (err < 0) {
			kfree(cnt);
			goto err_unlock;
		}
	} else {
		cnt = xa_load(&c->counters, id);
		if (!cnt) {
			err = -EINVAL;
			goto err_unlock;
		}
	}

	err = vrnic_cnt_read(dev, VRNIC_COUNTER_SCOPE_QP, b->qpn, b->at_bind);
	if (err)
		goto err_new;
	memcpy(b->last, b->at_bind, sizeof(b->last));
	list_add_tail(&b->node, &cnt->qps);
	cnt->fresh = false;
	counter->id = id;
	ibqp->counter = counter;
	mutex_unlock(&c->lock);
	ibdev_dbg(&dev->ibdev, "QP %u bound to counter %u\n", b->qpn, id);
	return 0;

err_new:
	if (new) {
		xa_erase(&c->counters, id);
		kfree(cnt);
	}
err_unlock:
	mutex_unlock(&c->lock);
	kfree(b);
	return err;
}

/*
 * Called with the rdma_counter's lock, also by the core just before it
 * destroys the QP, whose unbinding it does not undo on failure: so this
 * always unbinds, keeping the QP's last values if a final read fails.
 */
static int vrnic_counter_unbind_qp(struct ib_qp *ibqp)
{
	struct vrnic_dev *dev = to_vdev(ibqp->device);
	struct rdma_counter *counter = ibqp->counter;
	struct vrnic_counters *c = &dev->cnt;
	struct vrnic_cnt_qp *b = NULL;
	struct vrnic_cnt *cnt = NULL;
	u32 i;

	mutex_lock(&c->lock);
	if (counter)
		cnt = xa_load(&c->counters, counter->id);
	if (cnt)
		b = vrnic_cnt_find(cnt, ibqp);
	if (b) {
		vrnic_cnt_read(dev, VRNIC_COUNTER_SCOPE_QP, b->qpn, b->last);
		for (i = 0; i < c->num; i++) {
			u64 d = b->last[i] - b->at_bind[i];

			cnt->base[i] += d;
			c->moved[i] += d;
		}
		list_del(&b->node);
		cnt->fresh = false;
		ibdev_dbg(&dev->ibdev, "QP %u unbound from counter %u\n",
			  b->qpn, counter->id);
		kfree(b);
	}
	ibqp->counter = NULL;
	mutex_unlock(&c->lock);
	return 0;
}

static void vrnic_cnt_free(struct vrnic_cnt *cnt)
{
	struct vrnic_cnt_qp *b, *tmp;

	list_for_each_entry_safe(b, tmp, &cnt->qps, node)
		kfree(b);
	kfree(cnt);
}

/* The last QP is gone (the core read the counter's values just before). */
static int vrnic_counter_dealloc(struct rdma_counter *counter)
{
	struct vrnic_dev *dev = to_vdev(counter->device);
	struct vrnic_cnt *cnt;

	mutex_lock(&dev->cnt.lock);
	cnt = xa_erase(&dev->cnt.counters, counter->id);
	mutex_unlock(&dev->cnt.lock);
	if (cnt) {
		WARN_ON(!list_empty(&cnt->qps));
		vrnic_cnt_free(cnt);
	}
	return 0;
}

static struct rdma_hw_stats *
vrnic_counter_alloc_stats(struct rdma_counter *counter)
{
	return vrnic_alloc_stats(to_vdev(counter->device));
}

/*
 * Called with the rdma_counter's lock. ib_core asks once per counter value
 * when it shows a link: all QPs are read at most once per stats lifespan.
 */
static int vrnic_counter_update_stats(struct rdma_counter *counter)
{
	struct vrnic_dev *dev = to_vdev(counter->device);
	struct rdma_hw_stats *stats = counter->stats;
	struct vrnic_counters *c = &dev->cnt;
	u32 n = min_t(u32, stats->num_counters, c->num);
	struct vrnic_cnt_qp *b;
	struct vrnic_cnt *cnt;
	int err = 0;

	mutex_lock(&c->lock);
	cnt = xa_load(&c->counters, counter->id);
	if (!cnt) {
		err = -EINVAL;
		goto out;
	}
	if (cnt->fresh && time_before(jiffies, cnt->read_at + stats->lifespan))
		goto out;
	memcpy(c->sum, cnt->base, sizeof(c->sum));
	list_for_each_entry(b, &cnt->qps, node) {
		err = vrnic_cnt_qp_add(dev, b, c->sum);
		if (err)
			goto out;
	}
	memcpy(stats->value, c->sum, n * sizeof(*c->sum));
	cnt->read_at = jiffies;
	cnt->fresh = true;
out:
	mutex_unlock(&c->lock);
	return err;
}

static const struct ib_device_ops vrnic_counter_ops = {
	.alloc_hw_port_stats = vrnic_alloc_hw_port_stats,
	.counter_alloc_stats = vrnic_counter_alloc_stats,
	.counter_bind_qp = vrnic_counter_bind_qp,
	.counter_dealloc = vrnic_counter_dealloc,
	.counter_unbind_qp = vrnic_counter_unbind_qp,
	.counter_update_stats = vrnic_counter_update_stats,
	.get_hw_stats = vrnic_get_hw_stats,
};

/*
 * At probe, once the admin queue runs: with CAPS.COUNTERS, the names, and
 * how many counters the device has (it writes min(asked, its number) and
 * says how many). Without the CAPS bit, or if the device cannot answer,
 * no counters at all (the probe goes on).
 */
void vrnic_counters_init(struct vrnic_dev *dev)
{
	struct vrnic_counters *c = &dev->cnt;
	u32 count, i;
	int err;

	mutex_init(&c->lock);
	xa_init_flags(&c->counters, XA_FLAGS_ALLOC1);
	c->num = 0;
	if (!vrnic_has_cap(dev, VRNIC_BAR0_CAPS_COUNTERS_MASK))
		return;

	for (i = 0; i < VRNIC_COUNTER_COUNT; i++) {
		WARN_ON(strscpy(c->names[i], vrnic_counter_name(i),
				VRNIC_COUNTER_NAME_LEN) < 0);
		string_lower(c->names[i], c->names[i]);
		c->descs[i].name = c->names[i];
	}

	mutex_lock(&c->lock);
	err = vrnic_cmd_query_counters(dev, VRNIC_COUNTER_SCOPE_PORT, 0, c->raw,
				       VRNIC_COUNTER_COUNT, &count);
	mutex_unlock(&c->lock);
	if (err) {
		dev_warn(&dev->pdev->dev,
			 "CAPS.COUNTERS but QUERY_COUNTERS failed (%d): no counters\n",
			 err);
		return;
	}
	if (count > VRNIC_COUNTER_COUNT)
		dev_warn(&dev->pdev->dev,
			 "QUERY_COUNTERS: %u values for %u; using %u\n", count,
			 VRNIC_COUNTER_COUNT, VRNIC_COUNTER_COUNT);
	else if (count < VRNIC_COUNTER_COUNT)
		dev_info(&dev->pdev->dev, "the device has %u of %u counters\n",
			 count, VRNIC_COUNTER_COUNT);
	c->num = min_t(u32, count, VRNIC_COUNTER_COUNT);
}

/* Before registration: the counter verbs, only if the device has counters. */
void vrnic_counters_set_ops(struct vrnic_dev *dev)
{
	if (dev->cnt.num)
		ib_set_device_ops(&dev->ibdev, &vrnic_counter_ops);
}

/* After unregistration (every QP is unbound then; anything left is freed). */
void vrnic_counters_free(struct vrnic_dev *dev)
{
	struct vrnic_counters *c = &dev->cnt;
	struct vrnic_cnt *cnt;
	unsigned long id;

	xa_for_each(&c->counters, id, cnt)
		vrnic_cnt_free(cnt);
	xa_destroy(&c->counters);
	mutex_destroy(&c->lock);
}
