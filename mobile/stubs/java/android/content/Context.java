package android.content;

/** Stand-in for Android's Context, which gobind's go/Seq.java names; never instantiated on the JVM. */
public abstract class Context {}
