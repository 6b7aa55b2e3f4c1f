import pytest
from django.urls import reverse

from battery.models import BatteryRun, ItemResult


@pytest.fixture
def run(db, tmp_path) -> BatteryRun:
    run = BatteryRun.objects.create(
        seed=7,
        suites=["L"],
        target="in-process",
        agent_name="battery-0123456789ab-1",
        status=BatteryRun.Status.FAILED,
        score=80.0,
        report_dir=str(tmp_path),
        suite_scores={"L": {"score": 80.0}},
        gates=[{"name": "L pass rate >= 100%", "passed": False}],
    )
    ItemResult.objects.create(
        run=run, suite="L", item="append_read_back", title="Append", passed=True, duration_ms=3.5
    )
    ItemResult.objects.create(
        run=run,
        suite="L",
        item="isolation",
        title="Isolation",
        passed=False,
        failure_code="R3",
        detail="B saw A's event",
        duration_ms=4.0,
    )
    return run


def test_changelist_lists_runs_with_status_score_and_report(admin_client, run, tmp_path):
    response = admin_client.get(reverse("admin:battery_batteryrun_changelist"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "battery-0123456789ab-1" in page
    assert f'<a href="{(tmp_path / "report.html").as_uri()}">{tmp_path / "report.html"}</a>' in page


def test_changelist_filters_by_status(admin_client, run):
    url = reverse("admin:battery_batteryrun_changelist")
    assert (
        "battery-0123456789ab-1"
        in admin_client.get(url, {"status__exact": "failed"}).content.decode()
    )
    assert (
        "battery-0123456789ab-1"
        not in admin_client.get(url, {"status__exact": "passed"}).content.decode()
    )


def test_change_page_shows_the_items_read_only(admin_client, run):
    response = admin_client.get(reverse("admin:battery_batteryrun_change", args=[run.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    for text in ("append_read_back", "isolation", "B saw A&#x27;s event", "R3"):
        assert text in page
    assert 'name="_save"' not in page  # nothing to save: runs are measurements


def test_runs_cannot_be_added_changed_or_deleted_in_the_admin(admin_client, run):
    assert admin_client.get(reverse("admin:battery_batteryrun_add")).status_code == 403
    assert (
        admin_client.post(reverse("admin:battery_batteryrun_change", args=[run.pk]), {}).status_code
        == 403
    )
    assert (
        admin_client.get(reverse("admin:battery_batteryrun_delete", args=[run.pk])).status_code
        == 403
    )
    assert BatteryRun.objects.filter(pk=run.pk, status="failed").exists()
