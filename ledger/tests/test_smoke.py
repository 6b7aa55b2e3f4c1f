def test_single_event_round_trip(client_a):
    created = client_a.post("/api/v1/events", {"event_type": "user.said", "payload": {"text": "hi"}}, format="json")
    assert created.status_code == 201, created.json()
    fetched = client_a.get(f"/api/v1/events/{created.json()['id']}")
    assert fetched.json() == created.json()
