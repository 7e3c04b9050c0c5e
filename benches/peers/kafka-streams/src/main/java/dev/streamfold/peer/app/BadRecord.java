package dev.streamfold.peer.app;

/**
 * A record the topology cannot process through no fault of ours (a
 * missing key field, a field of the wrong type). Thrown before any state
 * changes; the processing exception handler logs it, skips the record and
 * writes it to the dead-letter topic, as streamfold dead-letters a
 * record's errors.
 */
public final class BadRecord extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public BadRecord(String message) {
        // No stack trace: the message says everything, and building one per
        // bad record would cost more than processing it.
        super(message, null, false, false);
    }
}
