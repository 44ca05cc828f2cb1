// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * RoCE mode: the net_device the port belongs to (SPEC "Link modes").
 *
 * The device reports its MAC (port_attr.mac); the driver pairs the port with
 * the Ethernet netdev whose permanent address is that MAC, as erdma does,
 * with ib_device_set_netdev(). ib_core's GID cache (roce_gid_mgmt.c) then
 * fills the GID table from that netdev's addresses and calls add_gid/del_gid.
 *
 * A netdevice notifier follows the netdev: registering it replays
 * NETDEV_REGISTER and NETDEV_UP for every existing netdev, which is the scan
 * at probe; later registrations pair, NETDEV_UNREGISTER unpairs (dropping the
 * reference, so the netdev can go), and UP/DOWN/CHANGE (carrier) update the
 * port state and dispatch PORT_ACTIVE/PORT_ERR.
 *
 * No matching netdev: the port stays DOWN with an empty GID table until one
 * appears (its addresses then fill the table); rdma_cm cannot use the port
 * in the meantime. A port whose netdev goes away unpairs and is DOWN again.
 *
 * Everything here runs under rtnl (notifier callbacks), which protects
 * dev->netdev and dev->port_active.
 */
#include <linux/if_arp.h>
#include <linux/rtnetlink.h>
#include <linux/workqueue.h>

#include "vrnic.h"

/* The port follows its netdev: ACTIVE while it is up with a carrier. */
static bool vrnic_netdev_active(const struct net_device *ndev)
{
	return ndev && netif_running(ndev) && netif_carrier_ok(ndev);
}

static void vrnic_port_update(struct vrnic_dev *dev)
{
	bool active = vrnic_netdev_active(dev->netdev);
	struct ib_event event = {
		.device = &dev->ibdev,
		.event = active ? IB_EVENT_PORT_ACTIVE : IB_EVENT_PORT_ERR,
		.element.port_num = VRNIC_PORT_NUM,
	};

	ASSERT_RTNL();
	if (active == dev->port_active)
		return;
	dev->port_active = active;
	if (test_bit(VRNIC_FLAG_REGISTERED, &dev->flags))
		ib_dispatch_event(&event);
}

static void vrnic_rescan_work(struct work_struct *work)
{
	struct vrnic_dev *dev = container_of(work, struct vrnic_dev,
					     rescan_work);

	rdma_roce_rescan_port(&dev->ibdev, VRNIC_PORT_NUM);
}

static void vrnic_pair(struct vrnic_dev *dev, struct net_device *ndev)
{
	int err;

	ASSERT_RTNL();
	err = ib_device_set_netdev(&dev->ibdev, ndev, VRNIC_PORT_NUM);
	if (err) {
		dev_warn(&dev->pdev->dev, "cannot pair with %s: %d\n",
			 netdev_name(ndev), err);
		return;
	}
	dev->netdev = ndev;
	dev_info(&dev->pdev->dev, "paired with %s (%pM)\n", netdev_name(ndev),
		 dev->mac);
	/*
	 * Paired after registration: the GID cache may have looked at this
	 * netdev's events before the pairing; rescan (it takes rtnl, so not
	 * from here).
	 */
	if (test_bit(VRNIC_FLAG_REGISTERED, &dev->flags))
		schedule_work(&dev->rescan_work);
	vrnic_port_update(dev);
}

static void vrnic_unpair(struct vrnic_dev *dev)
{
	ASSERT_RTNL();
	dev_info(&dev->pdev->dev, "unpaired from %s\n",
		 netdev_name(dev->netdev));
	/* NULL cannot fail: it drops the core's reference. */
	ib_device_set_netdev(&dev->ibdev, NULL, VRNIC_PORT_NUM);
	dev->netdev = NULL;
	vrnic_port_update(dev);
}

static bool vrnic_netdev_matches(struct vrnic_dev *dev, struct net_device *ndev)
{
	return ndev->type == ARPHRD_ETHER &&
	       ether_addr_equal(ndev->perm_addr, dev->mac);
}

static int vrnic_netdev_event(struct notifier_block *nb, unsigned long event,
			      void *ptr)
{
	struct vrnic_dev *dev = container_of(nb, struct vrnic_dev, netdev_nb);
	struct net_device *ndev = netdev_notifier_info_to_dev(ptr);

	switch (event) {
	case NETDEV_REGISTER:
		if (!dev->netdev && vrnic_netdev_matches(dev, ndev))
			vrnic_pair(dev, ndev);
		break;
	case NETDEV_UNREGISTER:
		if (ndev == dev->netdev)
			vrnic_unpair(dev);
		break;
	case NETDEV_UP:
	case NETDEV_DOWN:
	case NETDEV_CHANGE:
		if (ndev == dev->netdev)
			vrnic_port_update(dev);
		break;
	default:
		break;
	}
	return NOTIFY_DONE;
}

/* Before ib_register_device(): pairs with a netdev that already exists. */
int vrnic_netdev_start(struct vrnic_dev *dev)
{
	int err;

	INIT_WORK(&dev->rescan_work, vrnic_rescan_work);
	dev->netdev_nb.notifier_call = vrnic_netdev_event;
	err = register_netdevice_notifier(&dev->netdev_nb);
	if (err) {
		dev_err(&dev->pdev->dev, "netdevice notifier: %d\n", err);
		return err;
	}
	dev->netdev_nb_registered = true;
	rtnl_lock();
	if (!dev->netdev)
		dev_info(&dev->pdev->dev,
			 "no interface with MAC %pM yet: port DOWN until one appears\n",
			 dev->mac);
	rtnl_unlock();
	return 0;
}

/* After ib_register_device(): the state the port had is now its first event. */
void vrnic_netdev_registered(struct vrnic_dev *dev)
{
	rtnl_lock();
	if (dev->port_active) {
		struct ib_event event = {
			.device = &dev->ibdev,
			.event = IB_EVENT_PORT_ACTIVE,
			.element.port_num = VRNIC_PORT_NUM,
		};

		ib_dispatch_event(&event);
	}
	rtnl_unlock();
}

/*
 * Stop following netdevs and unpair (the unregistration replays
 * NETDEV_UNREGISTER to us). Safe if never started.
 */
void vrnic_netdev_stop(struct vrnic_dev *dev)
{
	if (!dev->netdev_nb_registered)
		return;
	unregister_netdevice_notifier(&dev->netdev_nb);
	dev->netdev_nb_registered = false;
	cancel_work_sync(&dev->rescan_work);
}
