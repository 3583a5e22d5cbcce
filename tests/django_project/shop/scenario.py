"""What the test runs inside the project (``manage.py shell -c "import shop.scenario"``):
enqueue in and out of transactions, wait for the worker, print what came back as JSON."""

import datetime
import json
import time

from django.db import transaction
from django.tasks import TaskResultStatus

from shop.models import Order
from shop.tasks import boom, charge, flaky, shout


def wait(result, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not result.is_finished:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{result.task.name} {result.id} is still {result.status}")
        time.sleep(0.05)
        result.refresh()
    return result


with transaction.atomic():
    order = Order.objects.create(customer="acme")
    committed = charge.enqueue(order.id)
try:
    with transaction.atomic():
        Order.objects.create(customer="ghost")
        rolled_back = charge.enqueue(999)
        raise RuntimeError("the request failed")
except RuntimeError:
    pass
later = charge.using(
    run_after=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
).enqueue(order.id)
retried, loud, failed = flaky.enqueue(1), shout.enqueue("hi"), boom.enqueue()
results = {
    name: wait(r)
    for name, r in [
        ("committed", committed),
        ("retried", retried),
        ("loud", loud),
        ("failed", failed),
    ]
}
later.refresh()
print(
    json.dumps(
        {
            "committed": [
                results["committed"].status,
                results["committed"].return_value,
                results["committed"].id,
            ],
            "rolled_back_id": rolled_back.id,
            "orders": sorted(Order.objects.values_list("customer", flat=True)),
            "later": later.status,
            "retried": [
                results["retried"].status,
                results["retried"].return_value,
                results["retried"].attempts,
                [e.exception_class_path for e in results["retried"].errors],
            ],
            "loud": results["loud"].return_value,
            "failed": [
                results["failed"].status,
                results["failed"].errors[-1].exception_class_path,
                "KeyError: 'nothing here'" in results["failed"].errors[-1].traceback,
            ],
            "same": charge.get_result(committed.id).return_value,
            "statuses_are": results["committed"].status == TaskResultStatus.SUCCESSFUL,
        }
    )
)
