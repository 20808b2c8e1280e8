<?xml version="1.0"?>
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
    xmlns:java="http://xml.apache.org/xalan/java" exclude-result-prefixes="java">
  <xsl:output method="xml" indent="yes"/>
  <xsl:template match="/catalog">
    <report total="{sum(item/@price)}" count="{count(item)}">
      <xsl:for-each select="item">
        <xsl:sort select="@price" data-type="number" order="descending"/>
        <entry rank="{position()}" name="{java:JpXalanFn.shout(string(.))}" price="{@price * 2}"/>
      </xsl:for-each>
    </report>
  </xsl:template>
</xsl:stylesheet>
