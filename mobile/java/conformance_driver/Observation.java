package conformance_driver;

import monolock.Client;
import monolock.Leader;
import monolock.LeaderListener;
import monolock.Monolock;
import monolock.Observer;

/**
 * One observe command: tells every change of a name's leader as an observed
 * event, until release (or quit) stops it. After stop returns nothing more
 * is printed for its id, so the runner's released is the last word.
 */
final class Observation implements LeaderListener {
	/**
	 * How long observe may take to learn the first picture. The pipe's
	 * observe has no deadline, but Client.observe takes no NoTimeout (a
	 * negative wait gives up at once), so a day stands for "no limit".
	 */
	private static final long FIRST_PICTURE_MILLIS = 24L * 60 * 60 * 1000;

	private final String id;
	/** Set once observe has returned, unless stopped first. Guarded by this. */
	private Observer observer;
	/** Release or quit came: print nothing more. Guarded by this. */
	private boolean stopped;

	Observation(String id) {
		this.id = id;
	}

	/**
	 * Follows name's leader. It blocks until the first picture is known (the
	 * listener has it by then), so it runs on a thread of its own.
	 */
	void run(Client client, String name) {
		Observer o;
		try {
			o = client.observe(name, FIRST_PICTURE_MILLIS, this);
		} catch (Exception e) {
			failed(e);
			return;
		}
		synchronized (this) {
			if (!stopped) {
				observer = o;
				return;
			}
		}
		o.stop(); // released while it started: nobody else will stop it
	}

	/**
	 * Ends the observation. Observer.stop waits for a listener call in
	 * progress, which needs this object's lock: it is called without it.
	 */
	void stop() {
		Observer o;
		synchronized (this) {
			stopped = true;
			o = observer;
		}
		if (o != null) {
			o.stop();
		}
	}

	@Override
	public void onLeader(Leader leader) {
		synchronized (this) {
			if (!stopped) {
				Driver.emit(observed(id, leader));
			}
		}
	}

	private synchronized void failed(Exception e) {
		if (stopped) {
			return; // a release during the start ends it silently
		}
		Driver.emit(Driver.failure("error", id, e));
	}

	/**
	 * The observed event of a leader: token and value only with a token
	 * (a leader, or a held-back one that had one); an unknown picture says
	 * nothing of candidates either, since nobody can vouch for them.
	 */
	static String observed(String id, Leader leader) {
		String state = state(leader.getState());
		StringBuilder b = new StringBuilder("{\"event\":\"observed\",\"id\":").append(Json.quote(id))
				.append(",\"state\":").append(Json.quote(state));
		if (state.equals("unknown")) {
			return b.append('}').toString();
		}
		if (!leader.getTokenString().equals("0")) {
			b.append(",\"token\":").append(Json.quote(leader.getTokenString()))
					.append(",\"value\":").append(Json.quote(leader.getValue()));
		}
		return b.append(",\"candidates\":").append(leader.getCandidates()).append('}').toString();
	}

	/** The binding's state in the pipe's words. */
	private static String state(String binding) {
		return switch (binding) {
			case Monolock.LeaderLeading -> "leader";
			case Monolock.LeaderNone -> "none";
			case Monolock.LeaderHeldBack -> "held_back";
			default -> "unknown";
		};
	}
}
